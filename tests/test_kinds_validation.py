"""Bad input for every kind: a clear ValueError/TypeError in the caller, naming the
argument, and nothing enqueued."""

from __future__ import annotations

import numpy as np
import pytest

from mxsidecar import SidecarWriter

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def sw(tmp_path_factory):
    w = SidecarWriter(str(tmp_path_factory.mktemp("kinds")))
    yield w
    w.close()


def refused(sw, exc, match, call) -> None:
    before = sw._pipe._seq
    with pytest.raises(exc, match=match):
        call()
    assert sw._pipe._seq == before, "something was enqueued"


U8 = np.zeros((3, 4, 4), dtype=np.uint8)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"image": np.zeros((6, 4, 3), np.uint8)}, ValueError, "channels"),  # HWC given as CHW
        ({"image": np.zeros((2, 4, 4), np.uint8)}, ValueError, "channels"),
        ({"image": np.zeros((4, 4, 2), np.uint8), "dataformats": "HWC"}, ValueError, "channels"),
        ({"image": U8, "dataformats": "NCHW"}, ValueError, "dataformats"),
        ({"image": U8, "dataformats": "CWH"}, ValueError, "dataformats"),
        ({"image": np.full((3, 2, 2), 1.5)}, ValueError, r"image .* \[0, 1\]"),
        ({"image": np.full((3, 2, 2), np.nan)}, ValueError, "image"),
        ({"image": np.zeros((3, 2, 2), np.int32)}, TypeError, "image"),
        ({"image": np.zeros((3, 0, 2), np.uint8)}, ValueError, "image"),
        ({"image": np.zeros((5,), np.uint8)}, ValueError, "image"),
        ({"image": "cat.png"}, TypeError, "image"),
    ],
)
def test_bad_images(sw, kwargs, exc, match) -> None:
    refused(sw, exc, match, lambda: sw.add_image("img", **kwargs))


def test_bad_audio(sw) -> None:
    refused(sw, ValueError, r"audio .* \[-1, 1\]", lambda: sw.add_audio("a", np.array([0.0, 2.0])))
    refused(sw, ValueError, "audio must be mono", lambda: sw.add_audio("a", np.zeros((3, 3))))
    refused(sw, TypeError, "audio", lambda: sw.add_audio("a", np.zeros(4, np.int32)))
    refused(sw, ValueError, "sample_rate", lambda: sw.add_audio("a", np.zeros(4), sample_rate=0))
    refused(sw, ValueError, "audio", lambda: sw.add_audio("a", np.zeros(0)))


def test_bad_video(sw) -> None:
    refused(sw, ValueError, "vid_tensor", lambda: sw.add_video("v", np.zeros((2, 3, 8, 8), np.uint8)))
    refused(sw, ValueError, "channels", lambda: sw.add_video("v", np.zeros((1, 2, 2, 8, 8), np.uint8)))
    refused(sw, ValueError, "fps", lambda: sw.add_video("v", np.zeros((1, 2, 3, 8, 8), np.uint8), fps=0))


def test_bad_embeddings(sw) -> None:
    mat = np.zeros((4, 3), np.float32)
    refused(sw, ValueError, "embedding must be a matrix", lambda: sw.add_embedding("e", np.zeros(4)))
    refused(sw, ValueError, "labels must hold 4", lambda: sw.add_embedding("e", mat, labels=["a", "b"]))
    refused(sw, ValueError, "labels must hold 4", lambda: sw.add_embedding("e", mat, labels=np.arange(3)))
    refused(sw, ValueError, "images must hold 4", lambda: sw.add_embedding("e", mat, images=np.zeros((3, 1, 2, 2))))
    refused(sw, ValueError, "channels", lambda: sw.add_embedding("e", mat, images=np.zeros((4, 2, 2, 2))))
    big = np.zeros((4, 1, 5000, 5000), np.uint8)
    refused(sw, ValueError, "8192", lambda: sw.add_embedding("e", mat, images=big))
    refused(sw, ValueError, "escape", lambda: sw.add_embedding("..", mat))
    refused(
        sw,
        ValueError,
        "metadata_header",
        lambda: sw.add_embedding("e", mat, labels=list("abcd"), metadata_header=["x"]),
    )
    rows = [["a", 1], ["b", 2], ["c", 3], ["d", 4]]
    refused(sw, ValueError, "metadata_header", lambda: sw.add_embedding("e", mat, labels=rows, metadata_header=["x"]))
    refused(sw, ValueError, "tensor_format", lambda: sw.add_embedding("e", mat, tensor_format="csv"))


def test_bad_pr_curves(sw) -> None:
    lab = np.array([0, 1, 1, 0])
    pred = np.array([0.1, 0.9, 0.8, 0.3])
    refused(sw, ValueError, "predictions", lambda: sw.add_pr_curve("p", lab, np.array([0.1, np.nan, 0.2, 0.3])))
    refused(sw, ValueError, "predictions", lambda: sw.add_pr_curve("p", lab, pred * 2))
    refused(sw, ValueError, "as many elements", lambda: sw.add_pr_curve("p", lab, pred[:3]))
    refused(sw, ValueError, "labels must be 0 or 1", lambda: sw.add_pr_curve("p", lab * 2, pred))
    refused(sw, ValueError, "num_thresholds", lambda: sw.add_pr_curve("p", lab, pred, num_thresholds=1))
    refused(sw, ValueError, "as many elements", lambda: sw.add_pr_curve("p", lab, pred, weights=np.ones(2)))
    refused(sw, ValueError, "labels must have at least 1", lambda: sw.add_pr_curve("p", np.zeros(0), np.zeros(0)))


def test_bad_hparams_layouts_graphs(sw) -> None:
    refused(sw, TypeError, "hparam_dict", lambda: sw.add_hparams({"lr": [1, 2]}, {"acc": 1.0}))
    refused(sw, TypeError, "hparam_dict", lambda: sw.add_hparams({}, {"acc": 1.0}))
    refused(sw, TypeError, "metric_dict", lambda: sw.add_hparams({"lr": 0.1}, {"acc": "high"}))
    refused(sw, ValueError, "hparam_domain_discrete", lambda: sw.add_hparams({"lr": 0.1}, {}, {"mom": [1]}))
    refused(sw, ValueError, "status", lambda: sw.add_hparams({"lr": 0.1}, {}, status="DONE"))
    refused(sw, ValueError, "Margin", lambda: sw.add_custom_scalars({"c": {"m": ["Margin", ["a", "b"]]}}))
    refused(sw, ValueError, "Multiline", lambda: sw.add_custom_scalars({"c": {"m": ["Lines", ["a"]]}}))
    refused(sw, TypeError, "layout", lambda: sw.add_custom_scalars([]))
    refused(sw, TypeError, "net", lambda: sw.add_graph("resnet"))
