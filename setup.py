"""Metadata only: the protobuf modules are checked in and built at import time (no protoc at install)."""

from setuptools import find_packages, setup

# MXNet's last release, 1.9.1, is a py3-none wheel that pip would install anywhere, but it
# only runs where numpy < 1.24 does (it uses np.bool etc.), and numpy < 1.24 has no wheels
# for Python 3.12+ (apache/mxnet#21165). So the extra installs it on 3.8-3.11 only; on 3.12+
# `pip install '.[mxnet]'` installs the writer alone, which logs numpy arrays.
CAN_RUN_MXNET = 'python_version < "3.12"'
MXNET = [f"mxnet==1.9.1; {CAN_RUN_MXNET}", f"numpy<1.24; {CAN_RUN_MXNET}"]

setup(
    name="mxsidecar",
    version="0.1.0",
    description="A TensorBoard writer for Apache MXNet that moves all logging work into a sidecar process",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.8",
    packages=find_packages(include=["mxsidecar", "mxsidecar.*"]),
    package_data={"mxsidecar": ["py.typed", "formats/proto/*.proto", "formats/proto/*.pyi"]},
    # Every range below is tested at both ends by tox.ini's stacks (README.md, "Supported and
    # tested stacks"). An environment outside them fails here, at install, not at the first add_*.
    install_requires=[
        "numpy>=1.19,<3",  # 1.19: AWS's MXNet 1.9 images; 2.x on Python 3.13
        "protobuf>=3.20,<8",  # 3.20.3: what the SageMaker toolkits pin; our messages build on 3.20-7.x
        "pillow>=8.0",  # wheels for Python 3.8 and 3.9
        "psutil>=5.8",
        "crc32c>=2.2",
    ],
    extras_require={
        # GPU users install mxnet-cu1xx themselves; pip cannot substitute it.
        "mxnet": MXNET,
        # A URL logdir (README.md, "Remote log directories"): fsspec and the scheme's file system,
        # imported by the sidecar and by the constructor's check only.
        "s3": ["s3fs"],
        "gcs": ["gcsfs"],
        # The remote tests: a real S3 endpoint (moto's server on 127.0.0.1) and s3fs. Its own extra, not
        # part of "test": moto pulls in ~40 distributions (boto3, cryptography, flask, ...) that every
        # stack's pinned constraints file would have to carry; tox.ini adds it to py311-pb7 only, where
        # the s3 tests run (elsewhere they skip).
        "s3test": ["s3fs", "moto[server]"],
        # Likewise for gs://: a GCS emulator (gcp-storage-emulator's server on 127.0.0.1) and gcsfs,
        # which bring google-cloud-storage, google-auth, grpcio-status ...; py311-pb7 only.
        "gcstest": ["gcsfs", "gcp-storage-emulator"],
        "test": [
            "pytest",
            "pytest-timeout",
            "hypothesis",
            # The reader our tests judge by, whichever one the stack can run: 2.13 is the last for
            # Python 3.8; 2.16-2.20 take protobuf 3.19.6-5.x; 2.21 needs protobuf >= 6.31.1.
            "tensorboard>=2.13,<2.22",
            # TensorBoard 2.13's vendored html5lib imports six without declaring it (2.14 does).
            'six; python_version < "3.9"',
            *MXNET,
        ],
        # tensorboardX.add_audio needs soundfile. Where MXNet runs, matplotlib stays below 3.9 (which
        # wants numpy >= 1.23); 3.8.x has no wheels for Python 3.13, so 3.12+ take any matplotlib.
        "perf": [
            "tensorboardX",
            "soundfile",
            f"matplotlib<3.9; {CAN_RUN_MXNET}",
            'matplotlib; python_version >= "3.12"',
            *MXNET,
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.8",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
