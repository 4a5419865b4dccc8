"""Property tests of invariant 5: an argument the caller can check is checked there.

For every ``add_*`` argument (shapes, dtypes, values, tags, steps, wall times,
options) hypothesis draws inputs, good and bad, and each call must end one of two ways:

* refused in the caller: ``ValueError``/``TypeError``, with nothing enqueued
  (``sw._pipe._seq`` unchanged);
* accepted, and then written: after ``flush()``, ``stats()['rejected']`` has not moved,
  no ``SidecarError``, and the event file (or the projector's files) holds the value.

For numpy inputs the values count too (the caller can read them without a sync); for
MXNet NDArrays only shapes and dtypes vary (values are valid), since the caller cannot
read their data.

One writer per test function.  If its sidecar dies, the example that killed it fails
and the writer is replaced, so that hypothesis can go on shrinking.

``REGRESSIONS`` keeps the minimal inputs the properties found getting past the caller
(refused by the sidecar, or killing it) before the checks were closed: each must now be
refused in the caller or written.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import wave
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
from conftest import read_events
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context, event, note
from hypothesis.extra import numpy as hnp

from mxsidecar import SidecarWriter
from mxsidecar.errors import MxSidecarError
from mxsidecar.formats.records import iter_records

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # refusals are counted (notices), not warned about here
    pytest.mark.filterwarnings("ignore:Creating an ndarray from"),  # ragged lists (numpy 2 moved the category)
]

# More examples for a deeper search, e.g. MXSIDECAR_PROPERTY_SCALE=20 (the defaults keep the file at ~25 s).
SCALE = float(os.environ.get("MXSIDECAR_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
}

# ---------------------------------------------------------------------------------
# The harness: one writer, the verdict of each call, the values it wrote.


class Val(NamedTuple):
    run: str  # '' for the writer's own run
    step: int
    wall_time: float
    value: Any  # tensorboard's Summary.Value


class Harness:
    def __init__(self, root: str) -> None:
        self.root = root
        self.writers = 0
        self._open()

    def _open(self) -> None:
        self.writers += 1
        self.logdir = os.path.join(self.root, f"w{self.writers}")
        self.sw = SidecarWriter(self.logdir)
        self.offsets: dict[str, int] = {}
        self.written: Counter[tuple[str, str]] = Counter()  # (run, tag) -> values read back

    def _replace(self) -> None:
        with contextlib.suppress(Exception):
            self.sw.close()
        self._open()

    def close(self) -> None:
        self.sw.close()
        # The whole files, re-read with conftest's strict reader, hold what was read bit by bit.
        total: Counter[tuple[str, str]] = Counter()
        for path in _event_files(self.logdir):
            run = _run_of(self.logdir, path)
            total.update((run, v.tag) for ev in read_events(path) for v in ev.summary.value)
        assert total == self.written

    def read_new(self) -> list[Val]:
        """Summary values appended to any event file of this writer since the last call."""
        from tensorboard.compat.proto import event_pb2

        out = []
        for path in _event_files(self.logdir):
            start = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            end = start
            run = _run_of(self.logdir, path)
            for rec in iter_records(data, strict=True):
                end = start + rec.offset + len(rec.data) + 16
                ev = event_pb2.Event.FromString(rec.data)
                out.extend(Val(run, ev.step, ev.wall_time, value) for value in ev.summary.value)
            self.offsets[path] = end
        self.written.update((val.run, val.value.tag) for val in out)
        return out

    def attempt(self, call: Callable[[Any], Any]) -> list[Val] | None:
        """Refused in the caller (None) or written (the values read back); anything else fails."""
        sw = self.sw
        seq = sw._pipe._seq
        notices = Counter(sw._pipe.notices)
        try:
            call(sw)
        except MxSidecarError:
            raise  # WriterClosed is a ValueError too, but never the caller's fault here
        except (ValueError, TypeError) as exc:
            assert sw._pipe._seq == seq, f"{type(exc).__name__} raised after something was enqueued: {exc}"
            assert str(exc), f"{type(exc).__name__} without a message"
            _note(f"refused in the caller: {type(exc).__name__}: {exc}", f"refused: {str(exc)[:50]}")
            return None
        _note("accepted", "accepted")
        try:
            sw.flush(timeout=60)
            stats = sw.stats()
        except MxSidecarError as exc:
            cause = exc.__cause__
            self._replace()
            raise AssertionError(f"accepted by the caller, then the sidecar failed: {exc}\n{cause}") from None
        refused = Counter(sw._pipe.notices) - notices
        assert not refused, f"accepted by the caller, refused by the sidecar: {sorted(refused)}"
        assert stats["rejected"] == sum(notices.values())
        assert stats["last_error"] is None
        return self.read_new()


def _note(text: str, tally: str) -> None:
    if currently_in_test_context():  # not in the plain tests that use the harness
        note(text)
        event(tally)


def _event_files(logdir: str) -> list[str]:
    """Like conftest.event_files, but into run directories whose names start with '.'
    (glob's '**' skips those; TensorBoard does not), and files only."""
    return sorted(os.path.join(top, name) for top, _, files in os.walk(logdir) for name in files if "tfevents" in name)


def _run_of(logdir: str, path: str) -> str:
    run = os.path.relpath(os.path.dirname(path), logdir)
    return "" if run == "." else run


@pytest.fixture
def h(tmp_path):
    harness = Harness(str(tmp_path))
    yield harness
    harness.close()


@pytest.fixture(scope="module")
def regression_h(tmp_path_factory):
    """One harness for all the regression cases (a new writer only after a crash)."""
    harness = Harness(str(tmp_path_factory.mktemp("gaps")))
    yield harness
    harness.close()


def by_tag(vals: list[Val], run: str = "") -> Counter[str]:
    return Counter(v.value.tag for v in vals if v.run == run)


def check_common(vals: list[Val], args: dict[str, Any]) -> None:
    """Every value of one call carries its step and, when given, its wall time."""
    step = args.get("global_step")
    for val in vals:
        assert val.step == (0 if step is None else int(step))
        if args.get("walltime") is not None:
            assert val.wall_time == float(args["walltime"])


# ---------------------------------------------------------------------------------
# Strategies.

FLOAT_DTYPES = ["float16", "float32", "float64", ">f2", ">f4", ">f8"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", ">i2", ">i8", ">u2", ">u4"]
REAL_DTYPES = [*FLOAT_DTYPES, *INT_DTYPES, "bool"]
BAD_DTYPES = ["complex64", "complex128", "object", "U4", "S4", "datetime64[s]", "timedelta64[s]", "longdouble"]
IMAGE_DTYPES = ["uint8", "float16", "float32", "float64", ">f4"]
AUDIO_DTYPES = ["int16", "float16", "float32", "float64", ">f8", ">i2"]


def chance(one_in: int) -> st.SearchStrategy[bool]:
    """True about once in ``one_in`` draws.  Not ``integers(...) == 0``: hypothesis draws
    the ends of a range far more often than the middle."""
    return st.integers(0, one_in - 1).map(lambda i: i == one_in // 2)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], one_in: int = 8) -> st.SearchStrategy[Any]:
    """``good`` but one time in ``one_in``: most examples get one fault at most, so that
    accepted calls are common enough to test what gets written."""
    return chance(one_in).flatmap(lambda b: bad if b else good)


GOOD_TAGS = ["t", "loss", "a/b/c", "ünï/cødé", "emoji😀", " padded ", "%/%\\", ".", "..", "x" * 300, "\u2028\x85"]
BAD_TAGS: list[Any] = ["", "   ", "a\nb", "nul\x00", "\ud800", "y" * 4097, None, 3, b"bytes", ("t",)]
good_tags = st.one_of(
    st.sampled_from(GOOD_TAGS),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cc",)), min_size=1, max_size=12).filter(str.strip),
)
tags = mostly(good_tags, st.sampled_from(BAD_TAGS))
steps = mostly(
    st.one_of(st.none(), st.integers(0, 2**63 - 1), st.sampled_from([np.int64(7), np.uint8(9), 2**63 - 1])),
    st.sampled_from([-1, 2**63, True, 1.5, "3", np.uint64(2**64 - 1), np.int8(-1)]),
)
walltimes = mostly(
    st.one_of(st.none(), st.floats(0, 1e12), st.integers(0, 10**12), st.just(np.float32(1.5e9))),
    st.one_of(st.floats(), st.sampled_from([10**400, -1, True, "now", np.float64(np.nan)])),
)


def _elements(dtype: np.dtype[Any], mode: str) -> st.SearchStrategy[Any]:
    """Element values: 'any' is every value of the dtype (NaN, Inf, extremes...); the
    others are the valid values of a kind: 'pixel' [0, 1] or any int, 'unit' [0, 1] or
    0/1, 'signed' [-1, 1] or any int, 'binary' 0/1, 'finite'."""
    if mode == "any" or dtype.kind == "b":
        return hnp.from_dtype(dtype)
    if mode == "binary":
        return st.sampled_from([0, 1])
    if dtype.kind == "f":
        width = 8 * dtype.itemsize
        if mode == "finite":
            return st.floats(allow_nan=False, allow_infinity=False, width=width)
        lo = -1.0 if mode == "signed" else 0.0
        return st.floats(lo, 1.0, width=width)
    if mode == "unit":
        return st.sampled_from([0, 1])
    return hnp.from_dtype(dtype)


def _bad_array(name: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    if name == "object":
        arr = np.empty(shape, object)
        arr[...] = 0.5
        return arr
    if name in ("U4", "S4"):
        return np.full(shape, "0.5", name)
    if name.startswith("complex"):
        return np.full(shape, 0.5 + 0.5j, name)
    if name == "longdouble":
        return np.full(shape, 0.5, np.longdouble)
    return np.zeros(shape, name)


any_shape = mostly(
    hnp.array_shapes(min_dims=0, max_dims=6, min_side=1, max_side=3),
    hnp.array_shapes(min_dims=1, max_dims=6, min_side=0, max_side=3),  # often empty
    4,
)


@st.composite
def arrays(
    draw: Any,
    dtypes: list[str] = REAL_DTYPES,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
    mode: str = "any",
    as_list: bool = True,
) -> Any:
    """A numpy array: mostly of ``dtypes`` and valid ``mode`` values; sometimes any
    values, an invalid dtype, or an odd memory layout (Fortran, reversed, strided,
    read-only); rarely a nested list."""
    shp = draw(shape if shape is not None else any_shape)
    if draw(chance(12)):
        return _bad_array(draw(st.sampled_from(BAD_DTYPES)), shp)
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    mode = draw(mostly(st.just(mode), st.just("any"), 5))
    arr = draw(hnp.arrays(dtype, shp, elements=_elements(dtype, mode)))
    layout = draw(st.sampled_from(["C", "C", "F", "flip", "strided", "readonly", "list"]))
    if layout == "F":
        arr = np.asfortranarray(arr)
    elif layout == "flip":
        arr = np.flip(arr)
    elif layout == "strided" and arr.ndim:
        arr = np.repeat(arr, 2, axis=-1)[..., ::2]
    elif layout == "readonly":
        arr.setflags(write=False)
    elif layout == "list" and as_list and arr.dtype.isnative and arr.dtype.kind in "biu" and arr.ndim:
        return arr.tolist()  # sequences of numbers are accepted too (ints only: exact round trip)
    return arr


not_arrays = st.sampled_from([None, "x.png", 1.5, {"a": 1}, [[1], [1, 2]], [1, None], object()])


def array_or_not(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return mostly(good, not_arrays, 20)


def sizes(lo: int, hi: int) -> st.SearchStrategy[int]:
    """A dimension from lo to hi, sometimes 0."""
    return mostly(st.integers(lo, hi), st.just(0), 10)


# ---------------------------------------------------------------------------------
# Known gaps: the caller accepts, the sidecar refuses or dies; the fix is not in the caller's checks
# (training/arguments.py, training/kinds/).

# ---------------------------------------------------------------------------------
# Scalars and text.

numbers = mostly(
    st.one_of(
        st.floats(),
        st.integers(-(10**20), 10**20),
        st.sampled_from([True, np.float16(np.inf), np.int64(-5), np.uint64(2**64 - 1), np.bool_(True)]),
        arrays(shape=st.sampled_from([(), (1,), (1, 1, 1)]), as_list=False),
    ),
    st.one_of(
        st.sampled_from([10**400, np.complex64(1), np.str_("1"), "1.0", None, np.datetime64(1, "s"), [1.0]]),
        arrays(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=2), as_list=False),
    ),
    5,
)


@st.composite
def scalar_args(draw: Any) -> dict[str, Any]:
    form = draw(st.sampled_from(["number", "number", "pair", "dict"]))
    value: Any = draw(numbers)
    if form == "pair":
        value = draw(st.sampled_from([tuple, list]))([draw(run_names), value])
    elif form == "dict":
        value = draw(st.dictionaries(run_names, numbers, max_size=3))
    return {"tag": draw(tags), "value": value, "global_step": draw(steps), "walltime": draw(walltimes)}


def _expected_number(x: Any) -> float:
    arr = np.asarray(x).reshape(-1)
    return float(np.float32(float(arr[0])))


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(args=scalar_args())
@example(args={"tag": "s", "value": 1.0, "global_step": None, "walltime": 10**400})  # OverflowError once
@example(args={"tag": "s", "value": np.array([2.0], ">f8"), "global_step": 3, "walltime": 1.5})
def test_add_scalar(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_scalar(**args))
    if vals is None:
        return
    check_common(vals, args)
    value, tag = args["value"], args["tag"]
    if isinstance(value, (tuple, list, dict)):
        pairs = dict([value]) if not isinstance(value, dict) else value
        assert Counter((v.run, v.value.tag) for v in vals) == Counter((f"{tag}/{k}", tag) for k in pairs)
        expected = {f"{tag}/{k}": _expected_number(x) for k, x in pairs.items()}
        for v in vals:
            assert _same_float(v.value.tensor.float_val[0], expected[v.run])
    else:
        assert by_tag(vals) == {tag: 1} and len(vals) == 1
        assert _same_float(vals[0].value.tensor.float_val[0], _expected_number(value))


run_names = mostly(
    st.one_of(
        st.sampled_from(["a", "train/loss", "ü", "x" * 255, "/".join(["y" * 200] * 5), "a b", "tfevents"]),
        st.text(
            st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=8
        ).filter(lambda t: "/" not in t and ":" not in t and "\\" not in t and t not in (".", "..")),
    ),
    st.sampled_from(["x" * 256, "/abs", "a/../b", "a//b", " a", "a:b", "a\\b", "z" * 1025, "\ud800", "", 5, None]),
    5,
)


@st.composite
def scalars_args(draw: Any) -> dict[str, Any]:
    mapping: Any = draw(st.dictionaries(run_names, numbers, max_size=3))
    if draw(chance(20)):
        mapping = draw(st.sampled_from([list(mapping.items()), None, 1.0, "abc"]))
    return {
        "main_tag": draw(run_names),
        "tag_scalar_dict": mapping,
        "global_step": draw(steps),
        "walltime": draw(walltimes),
    }


@pytest.mark.timeout(60)
@settings(max_examples=examples(120), **SETTINGS)
@given(args=scalars_args())
@example(args={"main_tag": "a" * 300, "tag_scalar_dict": {"b": 1.0}, "global_step": None, "walltime": None})
@example(args={"main_tag": "m", "tag_scalar_dict": {"/".join(["k" * 250] * 17): 1.0}, "global_step": None,
               "walltime": None})  # fmt: skip
@example(args={"main_tag": ".0", "tag_scalar_dict": {"a": 0.0}, "global_step": None, "walltime": None})  # hidden dir
def test_add_scalars(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_scalars(**args))
    if vals is None:
        return
    check_common(vals, args)
    main = args["main_tag"]
    assert Counter((v.run, v.value.tag) for v in vals) == Counter(
        (f"{main}/{k}", main) for k in args["tag_scalar_dict"]
    )


texts = mostly(
    st.one_of(st.text(max_size=50), st.sampled_from(["", "a\x00b", "# md\n|t|", "é" * 5000])),
    st.sampled_from(["\ud800 lone", None, b"bytes", 5, ["a"]]),
)


@pytest.mark.timeout(60)
@settings(max_examples=examples(100), **SETTINGS)
@given(
    tag=tags,
    text=texts,
    global_step=steps,
    walltime=walltimes,
)
def test_add_text(h, tag, text, global_step, walltime) -> None:
    args = {"tag": tag, "text": text, "global_step": global_step, "walltime": walltime}
    vals = h.attempt(lambda sw: sw.add_text(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {tag: 1}
    assert vals[0].value.tensor.string_val[0] == text.encode("utf-8")


# ---------------------------------------------------------------------------------
# Histograms.

bins_st = mostly(
    st.one_of(
        st.sampled_from(["default", "auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt"]),
        st.integers(1, 10_000),
        st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=6, unique=True).map(sorted),
        st.sampled_from([np.array([0.0, 1.0, 2.0]), (1, 2), [-1e300, 1e300], np.arange(10_001)]),
    ),
    st.one_of(
        st.lists(st.floats(), min_size=0, max_size=5),
        st.sampled_from(["bad", "", 0, -1, 10_001, [0, 10**400], np.zeros((2, 2)), [1, "a"], 2.5, True, None]),
    ),
    4,
)


@st.composite
def histogram_args(draw: Any) -> dict[str, Any]:
    values = draw(array_or_not(arrays(mode="finite")))
    return {
        "tag": draw(tags),
        "values": values,
        "global_step": draw(steps),
        "bins": draw(bins_st),
        "walltime": draw(walltimes),
    }


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(args=histogram_args())
@example(args={"tag": "h", "values": np.array([1.0, 2.0], ">f8"), "global_step": 1, "bins": 3, "walltime": None})
@example(args={"tag": "h", "values": np.array([1.0]), "global_step": 1, "bins": [0, 10**400], "walltime": None})
def test_add_histogram(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_histogram(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {args["tag"]: 1}
    x = np.asarray(args["values"]).astype(np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    histo = vals[0].value.histo
    assert (histo.num, histo.min, histo.max) == (x.size, x.min(), x.max())
    assert sum(histo.bucket) == x.size


# ---------------------------------------------------------------------------------
# Images, audio, video.

BAD_FORMATS: list[Any] = ["CWH", "nchw", "", "NCHWX", 3]


def _layout_shape(draw: Any, fmt: str) -> tuple[int, ...]:
    dims = {
        "N": sizes(1, 5),
        "C": mostly(st.sampled_from([1, 3, 4]), st.sampled_from([0, 2, 5])),
        "H": sizes(1, 6),
        "W": sizes(1, 6),
    }
    return tuple(draw(dims[letter]) for letter in fmt)


@st.composite
def image_args(draw: Any) -> dict[str, Any]:
    method = draw(st.sampled_from(["add_image", "add_images"]))
    if method == "add_image":
        fmt = draw(mostly(st.sampled_from([None, "CHW", "HWC", "HW", "NCHW", "NHWC"]), st.sampled_from(BAD_FORMATS)))
    else:
        fmt = draw(mostly(st.sampled_from(["default", "NCHW", "NHWC"]), st.sampled_from([None, "CHW", "nhwc"])))
    layout = {"default": "NCHW", None: draw(st.sampled_from(["HW", "CHW", "NCHW"]))}.get(fmt, fmt)
    if isinstance(layout, str) and layout in ("CHW", "HWC", "HW", "NCHW", "NHWC") and not draw(chance(10)):
        shape = st.just(_layout_shape(draw, layout))
    else:
        shape = any_shape
    image = draw(array_or_not(arrays(IMAGE_DTYPES, shape, mode="pixel")))
    args = {"tag": draw(tags), "image" if method == "add_image" else "img_tensor": image}
    args.update(global_step=draw(steps), walltime=draw(walltimes))
    if fmt != "default":
        args["dataformats"] = fmt
    return {"method": method, "args": args}


def _to_uint8(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What encoders/image.py makes of valid pixels, computed independently."""
    x = x.astype(x.dtype.newbyteorder("="))
    if x.dtype == np.uint8:
        return x
    work = np.float32 if x.dtype == np.float16 else x.dtype
    return np.rint(np.multiply(x, 255.0, dtype=work)).astype(np.uint8)


def _hwc(x: np.ndarray[Any, Any], fmt: str) -> np.ndarray[Any, Any]:
    x = {"HW": lambda a: a[:, :, None], "HWC": lambda a: a, "CHW": lambda a: a.transpose(1, 2, 0)}[fmt](x)
    return x


def _grid_size(n: int, hh: int, ww: int) -> tuple[int, int]:
    if n == 1:
        return hh, ww
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    return rows * (hh + 2) + 2, cols * (ww + 2) + 2


def _decode_png(blob: bytes) -> np.ndarray[Any, Any]:
    from PIL import Image

    arr = np.asarray(Image.open(io.BytesIO(blob)))
    return arr[:, :, None] if arr.ndim == 2 else arr


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(call=image_args())
@example(call={"method": "add_image", "args": {"tag": "i", "image": np.full((1, 2, 2), 0.5, ">f4")}})  # was garbled
def test_add_image(h, call) -> None:
    method, args = call["method"], call["args"]
    vals = h.attempt(lambda sw: getattr(sw, method)(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {args["tag"]: 1}
    x = np.asarray(args.get("image", args.get("img_tensor")))
    fmt = args.get("dataformats", "NCHW" if method == "add_images" else None) or {2: "HW", 3: "CHW", 4: "NCHW"}[x.ndim]
    if fmt.startswith("N"):
        n, single = x.shape[0], fmt[1:]
        x0 = x[0]
    else:
        n, single, x0 = 1, fmt, x
    dims = dict(zip(single, x0.shape))
    img = vals[0].value.image
    assert (img.height, img.width) == _grid_size(n, dims["H"], dims["W"])
    if n == 1:
        assert np.array_equal(_decode_png(img.encoded_image_string), _hwc(_to_uint8(x0), single))


@st.composite
def audio_shapes(draw: Any) -> tuple[int, ...]:
    kind = draw(st.sampled_from(["mono", "stereo", "stereo_first", "mono", "stereo", "stereo_first", "any"]))
    frames = draw(sizes(1, 40))
    base = {"mono": (frames,), "stereo": (frames, 2), "stereo_first": (2, frames)}.get(kind)
    if base is None:
        return draw(any_shape)
    ones = draw(st.lists(st.integers(0, len(base)), max_size=3))
    shape = list(base)
    for at in ones:
        shape.insert(at, 1)
    return tuple(shape)


@st.composite
def audio_args(draw: Any) -> dict[str, Any]:
    audio = draw(array_or_not(arrays(AUDIO_DTYPES, audio_shapes(), mode="signed")))
    rate = draw(
        mostly(
            st.one_of(
                st.sampled_from([44100, 8000, 1, np.int32(16000), np.uint64(22050), 2**30 - 1]),
                st.integers(1, 2**33),
            ),
            st.sampled_from([0, -1, 2**30, 2**31, 2**32 - 1, 2**32, 10**400, 44100.0, True, None, "44100"]),
        )
    )
    return {
        "tag": draw(tags),
        "audio": audio,
        "sample_rate": rate,
        "global_step": draw(steps),
        "walltime": draw(walltimes),
    }


def _frames(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """[frames, channels] int16, as the WAV must hold them (computed independently)."""
    x = x.astype(x.dtype.newbyteorder("="))
    dims = [d for d in x.shape if d != 1] or [1]
    x = x.reshape(dims)
    if x.ndim == 1:
        x = x[:, None]
    elif x.shape[1] != 2:
        x = x.T  # [2, frames]
    if x.dtype == np.int16:
        return x
    work = np.float64 if x.dtype == np.float16 else x.dtype
    return np.rint(np.multiply(x, 32767.0, dtype=work)).astype(np.int16)


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(args=audio_args())
@example(args={"tag": "a", "audio": np.array([0.5, -1.0], ">f8"), "sample_rate": 8000, "global_step": 0,
               "walltime": None})  # fmt: skip
def test_add_audio(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_audio(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {args["tag"]: 1}
    expected = _frames(np.asarray(args["audio"]))
    with wave.open(io.BytesIO(vals[0].value.audio.encoded_audio_string)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getnframes()) == (int(args["sample_rate"]), *expected.shape[::-1])
        assert w.readframes(w.getnframes()) == expected.astype("<i2").tobytes()


@st.composite
def video_args(draw: Any) -> dict[str, Any]:
    if not draw(chance(10)):
        shape = st.tuples(
            sizes(1, 4),
            sizes(1, 4),
            mostly(st.sampled_from([1, 3, 4]), st.sampled_from([0, 2, 5])),
            sizes(1, 5),
            sizes(1, 5),
        )
    else:
        shape = any_shape
    vid = draw(array_or_not(arrays(IMAGE_DTYPES, shape, mode="pixel")))
    fps = draw(
        mostly(
            st.one_of(
                st.floats(0.01, 1e6),
                st.integers(1, 1000),
                st.sampled_from([4, 0.5, 1e-300, 1e300, np.float32(30), np.int64(5)]),
            ),
            st.one_of(st.floats(), st.sampled_from([0, -1, 5e-324, 10**400, True, None, "4"])),
        )
    )
    return {"tag": draw(tags), "vid_tensor": vid, "global_step": draw(steps), "fps": fps, "walltime": draw(walltimes)}


@pytest.mark.timeout(60)
@settings(max_examples=examples(100), **SETTINGS)
@given(args=video_args())
@example(args={"tag": "v", "vid_tensor": np.zeros((1, 1, 1, 1, 1), np.uint8), "global_step": 0, "fps": 10**400,
               "walltime": None})  # fmt: skip
def test_add_video(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_video(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {args["tag"]: 1}
    n, _, _, hh, ww = np.shape(args["vid_tensor"])
    img = vals[0].value.image
    assert (img.height, img.width) == _grid_size(n, hh, ww)
    assert img.encoded_image_string[:4] == b"GIF8"


# ---------------------------------------------------------------------------------
# Embeddings and PR curves.

label_cells = st.one_of(st.text(max_size=5), st.integers(), st.floats(), st.none(), st.booleans())


def column_names(width: int) -> st.SearchStrategy[list[str]]:
    name = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Zl", "Zp")), min_size=1, max_size=4)
    return st.lists(name.filter(str.strip), min_size=width, max_size=width, unique=True)


@st.composite
def embedding_args(draw: Any) -> dict[str, Any]:
    n = draw(sizes(1, 5))
    d = draw(sizes(1, 4))
    mat_shape = st.just((n, d)) if not draw(chance(10)) else any_shape
    mat = draw(array_or_not(arrays(shape=mat_shape, mode="finite")))
    rows = n if not draw(chance(10)) else draw(st.integers(0, 6))
    width = draw(st.integers(2, 3))
    kinds = ["none", "strs", "cells", "rows", "array"]
    kind = draw(mostly(st.sampled_from(kinds), st.sampled_from(["ragged", "mixed", "bad"])))
    labels = draw(
        st.just(kind).flatmap(
            lambda kind: {
                "none": st.none(),
                "strs": st.lists(st.text(max_size=6), min_size=rows, max_size=rows),
                "cells": st.lists(label_cells, min_size=rows, max_size=rows),
                "rows": st.lists(st.lists(label_cells, min_size=width, max_size=width), min_size=rows, max_size=rows),
                "ragged": st.lists(st.lists(label_cells, max_size=3), min_size=rows, max_size=rows),
                "mixed": st.just([["a", "b"], "c"][: max(rows, 1)] + ["d"] * max(rows - 2, 0)),
                "array": arrays(shape=st.just((rows,))),
                "bad": not_arrays,
            }[kind]
        )
    )
    bad_headers = st.one_of(
        st.lists(st.text(max_size=4), min_size=width, max_size=width),
        st.sampled_from([["x", "x", "y"][:width], ["a\tb", "a b", "c"][:width], [" ", "\ufeff", "z"][:width]]),
        st.sampled_from([["only"], "ab", [1, 2]]),
    )
    good_header = column_names(width) if kind == "rows" else st.none()
    header = draw(mostly(st.one_of(st.none(), good_header), bad_headers))
    images = None
    if draw(st.booleans()):
        count = n if not draw(chance(10)) else draw(st.integers(0, 6))
        channels = mostly(st.sampled_from([1, 3, 4]), st.sampled_from([0, 2, 5]))
        shape = st.tuples(st.just(count), channels, sizes(1, 4), sizes(1, 4))
        images = draw(arrays(IMAGE_DTYPES, shape if not draw(chance(10)) else any_shape, mode="pixel"))
    return {
        "tag": draw(mostly(tags, st.sampled_from(["%" * 90, "é" * 130, "x" * 255]))),
        "embedding": mat,
        "labels": labels,
        "images": images,
        "global_step": draw(st.one_of(st.none(), st.integers(0, 3), steps)),
        "metadata_header": header,
        "tensor_format": draw(mostly(st.sampled_from(["tsv", "bytes"]), st.sampled_from(["csv", None, "TSV"]), 15)),
    }


def _projector_entry(logdir: str, name: str) -> Any:
    from google.protobuf import text_format

    from mxsidecar.formats.proto import projector_config_pb2

    config = projector_config_pb2.ProjectorConfig()
    with open(os.path.join(logdir, "projector_config.pbtxt"), encoding="utf-8") as f:
        text_format.Parse(f.read(), config)
    (entry,) = [e for e in config.embeddings if e.tensor_name == name]
    return entry


@pytest.mark.timeout(60)
@settings(max_examples=examples(120), **SETTINGS)
@given(args=embedding_args())
@example(args={"tag": "e", "embedding": np.ones((2, 2)), "labels": [["a", "b"], ["c", "d"]],
               "images": np.zeros((2, 1, 1, 1), np.uint8), "metadata_header": ["x", "x"]})  # fmt: skip
@example(args={"tag": "e", "embedding": np.ones((2, 2)), "labels": [["a", "b"], ["c", "d"]],
               "images": np.zeros((2, 1, 1, 1), np.uint8), "metadata_header": ["x\ty", "x y"]})  # fmt: skip
def test_add_embedding(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_embedding(**args))
    if vals is None:
        return
    assert vals == [], "an embedding writes no events"
    mat = np.asarray(args["embedding"])
    step = int(args.get("global_step") or 0)
    entry = _projector_entry(h.logdir, f"{args['tag']}:{step:05d}")
    assert list(entry.tensor_shape) == list(mat.shape)
    assert os.path.isfile(os.path.join(h.logdir, entry.tensor_path))
    labels = args["labels"]
    if labels is not None:
        with open(os.path.join(h.logdir, entry.metadata_path), "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        multi = isinstance(labels, (list, tuple)) and isinstance(labels[0], (list, tuple))
        assert len(lines) == mat.shape[0] + multi + 1  # a header row for several columns; the last '\n'
    assert bool(entry.sprite.image_path) == (args["images"] is not None)


@st.composite
def pr_args(draw: Any) -> dict[str, Any]:
    shape = draw(
        hnp.array_shapes(min_dims=0, max_dims=6, min_side=1, max_side=3) if not draw(chance(10)) else any_shape
    )
    same = st.just(shape) if not draw(chance(10)) else any_shape
    labels = draw(array_or_not(arrays(shape=st.just(shape), mode="binary")))
    predictions = draw(arrays(shape=same, mode="unit"))
    weights = draw(st.one_of(st.none(), arrays(shape=same, mode="unit"), arrays(shape=same, mode="finite")))
    thresholds = draw(
        mostly(
            st.one_of(st.integers(2, 300), st.sampled_from([201, 10_000, np.int64(5), 2049, 2050])),
            st.sampled_from([0, 1, 10_001, True, 3.0, None, "201"]),
        )
    )
    return {
        "tag": draw(tags),
        "labels": labels,
        "predictions": predictions,
        "num_thresholds": thresholds,
        "global_step": draw(steps),
        "weights": weights,
        "walltime": draw(walltimes),
    }


@pytest.mark.timeout(60)
@settings(max_examples=examples(120), **SETTINGS)
@given(args=pr_args())
def test_add_pr_curve(h, args) -> None:
    vals = h.attempt(lambda sw: sw.add_pr_curve(**args))
    if vals is None:
        return
    check_common(vals, args)
    assert by_tag(vals) == {args["tag"]: 1}
    n = int(args["num_thresholds"])
    tensor = vals[0].value.tensor
    assert [d.size for d in tensor.tensor_shape.dim] == [6, n]
    table = np.frombuffer(tensor.tensor_content, "<f4").reshape(6, n)
    labels = np.asarray(args["labels"]).astype(np.float64).reshape(-1)
    if args["weights"] is None:
        assert (table[0, 0], table[1, 0]) == (labels.sum(), labels.size - labels.sum())  # TP, FP at threshold 0


# ---------------------------------------------------------------------------------
# HParams and custom scalars.

hparam_values = mostly(
    st.one_of(
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
        st.sampled_from([10**300, -(2**1000), np.float32(0.5), np.int64(3), np.str_("s"), np.bool_(False)]),
    ),
    st.one_of(
        st.floats(),
        st.sampled_from([10**400, -(10**309), "\ud800", None, [1], b"b", np.float64(np.nan), np.longdouble(1), 1j]),
    ),
    10,
)


@st.composite
def hparams_args(draw: Any) -> dict[str, Any]:
    hparams: Any = draw(st.dictionaries(tags, hparam_values, min_size=1, max_size=3))
    metrics: Any = draw(st.dictionaries(tags, numbers, max_size=2))
    domains: Any = None
    if draw(st.booleans()):
        key = draw(st.sampled_from(sorted(hparams, key=repr)))
        same_type = {bool: st.booleans(), str: st.text(max_size=3)}.get(type(hparams[key]), st.integers(-5, 5))
        good = st.lists(same_type, min_size=1, max_size=3)
        domains = {
            key: draw(mostly(good, st.one_of(st.lists(hparam_values, max_size=3), st.sampled_from([(1, 2), "ab", 3]))))
        }
        if draw(chance(10)):
            domains = draw(st.sampled_from([{"missing": [1]}, [(key, [1])], "x", 0]))
    if draw(chance(20)):
        hparams = draw(st.sampled_from([None, [("a", 1)], "a", {}]))
    if draw(chance(20)):
        metrics = draw(st.sampled_from([None, [("m", 1.0)], 1.0]))
    return {
        "hparam_dict": hparams,
        "metric_dict": metrics,
        "hparam_domain_discrete": domains,
        "global_step": draw(steps),
        "status": draw(mostly(st.sampled_from(["SUCCESS", "FAILURE", "RUNNING"]), st.sampled_from(["ok", None]))),
    }


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(args=hparams_args())
@example(args={"hparam_dict": {"a": 10**400}, "metric_dict": {}})  # crashed the sidecar
@example(args={"hparam_dict": {"a": "\ud800"}, "metric_dict": {}})
@example(args={"hparam_dict": {"a": 1}, "metric_dict": {}, "hparam_domain_discrete": {"a": [10**400]}})
def test_add_hparams(h, args) -> None:
    # Each example is a run's first add_hparams (the harness keeps one writer, whose
    # run remembers its first call); later calls are tested in test_enc_prcurve_hparams_graph.py.
    h.sw._hparams_session = None
    vals = h.attempt(lambda sw: sw.add_hparams(**args))
    if vals is None:
        return
    check_common(vals, args)
    expected = Counter(["_hparams_/experiment", "_hparams_/session_start_info"])
    if args["status"] != "RUNNING":  # a RUNNING call writes no end: it would be final
        expected.update(["_hparams_/session_end_info"])
    expected.update(list(args["metric_dict"]))
    assert by_tag(vals) == expected


regexes = mostly(
    st.one_of(st.sampled_from(["loss", "a/.*", ".*", "x|y", "ü"]), st.text(st.characters(codec="utf-8"), min_size=1)),
    st.sampled_from(["(", "[a-", "\ud800", "", 3]),
    12,
)


@st.composite
def layouts(draw: Any) -> Any:
    chart = mostly(
        st.one_of(
            st.tuples(st.just("Multiline"), st.lists(regexes, min_size=1, max_size=3)),
            st.tuples(st.just("Margin"), st.lists(regexes, min_size=3, max_size=3)),
        ).map(list),
        st.one_of(
            st.tuples(st.sampled_from(["multiline", "Other", "Margin"]), st.lists(regexes, max_size=4)).map(list),
            st.sampled_from([["Multiline"], "Multiline", None, ["Margin", "abc"], ("Multiline", ("a", "b"))]),
        ),
    )
    layout: Any = draw(
        st.dictionaries(tags, st.dictionaries(tags, chart, min_size=1, max_size=2), min_size=1, max_size=2)
    )
    if draw(chance(20)):
        layout = draw(st.sampled_from([None, [], "layout", {"c": []}, {"c": None}]))
    return layout


@pytest.mark.timeout(60)
@settings(max_examples=examples(150), **SETTINGS)
@given(layout=layouts())
@example(layout={"c": {"t": ["Multiline", ["\ud800"]]}})  # refused by the sidecar once
@example(layout={"c": {"t": ["Margin", ["v", "\udc80", "hi"]]}})
def test_add_custom_scalars(h, layout) -> None:
    vals = h.attempt(lambda sw: sw.add_custom_scalars(layout))
    if vals is None:
        return
    from tensorboard.plugins.custom_scalar import layout_pb2

    assert by_tag(vals) == {"custom_scalars__config__": 1}
    parsed = layout_pb2.Layout.FromString(vals[0].value.tensor.string_val[0])
    assert [c.title for c in parsed.category] == list(layout)
    assert [len(c.chart) for c in parsed.category] == [len(charts) for charts in layout.values()]


# ---------------------------------------------------------------------------------
# MXNet NDArrays: shapes and dtypes vary, values are valid.

MX_DTYPES = ["float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool"]
MODES = {
    "scalar": "finite",
    "histogram": "finite",
    "image": "pixel",
    "audio": "signed",
    "video": "pixel",
    "embedding": "signed",  # valid: finite within float32, what TensorBoard reads
    "labels": "binary",
    "predictions": "unit",
    "weights": "unit",
}
small_shape = mostly(
    hnp.array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=3),
    hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=3),  # 0-d, or empty
    4,
)


@st.composite
def nd_specs(draw: Any) -> dict[str, Any]:
    """Numpy arrays of valid values, each to become an NDArray of its own dtype."""
    kind = draw(st.sampled_from(["scalar", "histogram", "image", "audio", "video", "embedding", "pr_curve"]))
    likely = {
        "scalar": st.sampled_from([(1,), (1, 1), (2,)]),
        "image": st.sampled_from([(3, 2, 2), (2, 2), (2, 1, 3, 3), (2, 3, 4)]),
        "audio": st.sampled_from([(5,), (5, 2), (2, 5), (1, 4)]),
        "video": st.sampled_from([(1, 2, 3, 2, 2), (2, 1, 1, 3, 3)]),
        "embedding": st.sampled_from([(3, 2), (1, 1)]),
    }.get(kind, small_shape)

    def one(role: str, shape: st.SearchStrategy[tuple[int, ...]]) -> np.ndarray[Any, Any]:
        dtype = np.dtype(draw(st.sampled_from(MX_DTYPES)))
        shp = draw(mostly(shape, small_shape, 4))
        return draw(hnp.arrays(dtype, shp, elements=_elements(dtype, MODES[role])))

    parts: dict[str, Any] = {}
    if kind == "pr_curve":
        labels = one("labels", small_shape)
        parts["labels"] = labels
        parts["predictions"] = one("predictions", st.just(labels.shape))
        if draw(st.booleans()):
            parts["weights"] = one("weights", st.just(labels.shape))
    elif kind == "embedding":
        mat = one("embedding", likely)
        parts["embedding"] = mat
        rows = mat.shape[0] if mat.ndim else 1
        if draw(st.booleans()):
            parts["labels"] = one("labels", st.just((rows,)))
        if draw(st.booleans()):
            parts["images"] = one("image", st.just((rows, draw(st.sampled_from([1, 3])), 2, 2)))
    else:
        parts["value"] = one(kind, likely)
    return {"kind": kind, "parts": parts, "tag": f"nd/{kind}"}


def _nd_call(kind: str, nd: dict[str, Any], tag: str) -> Callable[[Any], Any]:
    calls: dict[str, Callable[[Any], Any]] = {
        "scalar": lambda sw: sw.add_scalar(tag, nd["value"]),
        "histogram": lambda sw: sw.add_histogram(tag, nd["value"]),
        "image": lambda sw: sw.add_image(tag, nd["value"]),
        "audio": lambda sw: sw.add_audio(tag, nd["value"]),
        "video": lambda sw: sw.add_video(tag, nd["value"]),
        "embedding": lambda sw: sw.add_embedding(tag, **nd),
        "pr_curve": lambda sw: sw.add_pr_curve(tag, **nd),
    }
    return calls[kind]


@pytest.mark.timeout(60)
@settings(max_examples=examples(80), **SETTINGS)
@given(spec=nd_specs())
def test_ndarrays(h, spec) -> None:
    mx = pytest.importorskip("mxnet")
    nd = {}
    for name, arr in spec["parts"].items():
        try:
            nd[name] = mx.nd.array(arr, dtype=arr.dtype)
        except Exception as exc:  # a shape or dtype MXNet itself cannot hold
            _note(f"mx.nd.array failed: {exc}", f"mxnet cannot make {arr.dtype} {arr.shape}")
            return
    kind, tag = spec["kind"], spec["tag"]
    vals = h.attempt(_nd_call(kind, nd, tag))
    if vals is None:
        return
    if kind == "embedding":
        assert vals == []
        entry = _projector_entry(h.logdir, f"{tag}:00000")
        assert list(entry.tensor_shape) == list(spec["parts"]["embedding"].shape)
    else:
        assert by_tag(vals) == {tag: 1}
    if kind == "histogram":
        assert vals[0].value.histo.num == spec["parts"]["value"].size


# ---------------------------------------------------------------------------------
# Regressions: minimal inputs that once got past the caller and were refused by the
# sidecar, or killed it.  Each must now be refused in the caller, or written.


def _all_in_buckets(vals: list[Val]) -> None:
    histo = vals[0].value.histo
    assert sum(histo.bucket) == histo.num, "values missing from the buckets"


REGRESSIONS: dict[str, tuple[Any, ...]] = {  # name: (what went wrong, call, optional check of the values written)
    "embedding-nan": (
        "writer.add_embedding does not check numpy matrix values (validate.check_embedding_matrix)",
        lambda sw: sw.add_embedding("e", np.array([[np.nan]]), images=np.zeros((1, 1, 1, 1), np.uint8)),
    ),
    "embedding-beyond-float32": (
        "writer.add_embedding does not check numpy matrix values (validate.check_embedding_matrix)",
        lambda sw: sw.add_embedding("e", np.array([[1e300]]), images=np.zeros((1, 1, 1, 1), np.uint8)),
    ),
    "embedding-long-tag": (
        "writer.add_embedding does not check the escaped tag's length (validate.check_embedding_tag)",
        lambda sw: sw.add_embedding("%" * 86, np.ones((1, 1)), images=np.zeros((1, 1, 1, 1), np.uint8)),
    ),
    "histogram-all-nan": (
        "writer.add_histogram does not check that numpy values hold a finite one (validate.check_histogram_values)",
        lambda sw: sw.add_histogram("h", np.array([np.nan, np.inf])),
    ),
    "histogram-edges-float32": (
        "encoders/histogram.py: a float32 value outside the edges by less than float32 resolves (0.0 > -1e-300) "
        "is counted neither by np.histogram (float64) nor as 'above' (compared in float32): written, not bucketed",
        lambda sw: sw.add_histogram("h", np.array([0.0], np.float32), bins=[-1.0, -1e-300]),
        _all_in_buckets,
    ),
    "histogram-subnormal-range": (
        "encoders/histogram.py: np.histogram raises IndexError for a range it cannot divide; the sidecar dies",
        lambda sw: sw.add_histogram("h", np.array([0.0, 5e-324]), bins=10),
    ),
    "histogram-overflowing-range": (
        "encoders/histogram.py: np.histogram raises IndexError when max - min overflows; the sidecar dies",
        lambda sw: sw.add_histogram("h", np.array([-1.7e308, 1.7e308]), bins="auto"),
    ),
    "histogram-rule-overflow": (
        "encoders/histogram._rule_bins: math.ceil((hi - lo) / width) of an infinite quotient -> OverflowError; "
        "the sidecar dies",
        lambda sw: sw.add_histogram("h", np.array([0.0, 0.0, 0.0, 1e-300, 1e300]), bins="auto"),
    ),
    "pr-negative-weights": (
        "writer.add_pr_curve checks weights are finite, not >= 0 (validate.check_pr_weights)",
        lambda sw: sw.add_pr_curve("p", np.array([1]), np.array([0.5]), weights=np.array([-1.0])),
    ),
    "audio-rate-u32": (
        "writer.add_audio accepts any sample_rate > 0; the WAV byte rate (rate * channels * 2) is a u32, so the "
        "encoder's struct.pack fails and the sidecar dies (validate.check_sample_rate)",
        lambda sw: sw.add_audio("a", np.zeros(4), sample_rate=2**31),
    ),
    "audio-rate-u32-refused": (
        "writer.add_audio accepts sample_rate=2**32, which encoders/audio.check_sample_rate refuses",
        lambda sw: sw.add_audio("a", np.zeros(4), sample_rate=2**32),
    ),
    "audio-rate-huge": (
        "writer.add_audio: sample_rate=10**400 makes the sidecar's float() overflow; it dies",
        lambda sw: sw.add_audio("a", np.zeros(4), sample_rate=10**400),
    ),
    "video-tiny-fps": (
        "writer.add_video: fps=5e-324 makes 100 / fps inf in video.frame_duration_ms; the sidecar dies",
        lambda sw: sw.add_video("v", np.zeros((1, 1, 1, 1, 1), np.uint8), fps=5e-324),
    ),
    "video-wide": (
        "writer.add_video: frames over 65535 px; Pillow raises OverflowError (not struct.error); the sidecar dies",
        lambda sw: sw.add_video("v", np.zeros((1, 1, 1, 1, 65536), np.uint8)),
    ),
    "video-merged-delay": (
        "encoders/video.py: Pillow merges identical frames, summing delays past a u16 (OverflowError); it dies",
        lambda sw: sw.add_video("v", np.zeros((1, 2, 1, 1, 1), np.uint8), fps=0.001),
    ),
    "scalars-run-is-a-file": (
        "sidecar: a run directory that cannot be made (a file of that name in the logdir) raises OSError in "
        "EventFile outside the refusal path; the sidecar dies instead of refusing the item",
        lambda sw: (open(os.path.join(sw.logdir, "x"), "w").close(), sw.add_scalars("x", {"a": 1.0})),
    ),
    "hparams-domains-not-dict": (
        "writer.add_hparams: hparam_domain_discrete=[...] raises AttributeError, not TypeError",
        lambda sw: sw.add_hparams({"a": 1}, {}, hparam_domain_discrete=[1]),
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_regression(regression_h, name) -> None:
    _, call, *check = REGRESSIONS[name]
    vals = regression_h.attempt(call)
    for c in check:
        if vals is not None:  # written: check what was written
            c(vals)
