"""Metadata only: the protobuf modules are generated and checked in (no protoc at install)."""

from setuptools import find_packages, setup

MXNET = ["mxnet==1.9.1", "numpy<1.24"]  # mxnet 1.9.1 breaks on numpy >= 1.24 (np.bool etc.)

setup(
    name="mxsidecar",
    version="0.1.0",
    description="A TensorBoard writer for Apache MXNet that moves all logging work into a sidecar process",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["mxsidecar", "mxsidecar.*"]),
    package_data={"mxsidecar": ["py.typed", "proto/*.proto", "proto/*.pyi"]},
    install_requires=[
        "numpy",
        "protobuf>=6.31.1,<8",  # the generated modules carry gencode 6.31.1
        "pillow",
        "psutil",
        "crc32c",
    ],
    extras_require={
        # GPU users install mxnet-cu1xx themselves; pip cannot substitute it.
        "mxnet": MXNET,
        "test": [
            "pytest",
            "pytest-timeout",
            "hypothesis",
            "tensorboard>=2.21",  # the reader our tests judge by
            *MXNET,
        ],
        # tensorboardX.add_audio needs soundfile; matplotlib is pinned to a release that still runs on numpy<1.24
        "perf": ["tensorboardX", "soundfile", "matplotlib<3.9", *MXNET],
    },
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
