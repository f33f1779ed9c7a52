"""The import-time check: the native engine links one libtorch, and must run
against the torch it was built against; another release has another C++ ABI
and would crash or fail to load with an unhelpful symbol error."""

from . import _build_info


def _release(version: str) -> str:
    # "2.15.0+cu132" and "2.15.0+cpu" are one release, one ABI.
    return version.split("+", 1)[0]


def check_torch() -> None:
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"nansense needs PyTorch: it was built against torch {_build_info.TORCH_VERSION}, and this Python "
            f"cannot import torch ({e}). Install it: pip install torch=={_release(_build_info.TORCH_VERSION)}"
        ) from e
    if _release(torch.__version__) != _release(_build_info.TORCH_VERSION):
        raise ImportError(
            f"nansense was built against torch {_build_info.TORCH_VERSION}, but this Python imports torch "
            f"{torch.__version__} (from {torch.__file__}). Its native engine works only with the torch it was "
            f"built against: reinstall nansense for this torch (pip install --force-reinstall --no-deps "
            f"--no-cache-dir <nansense source>), or install torch=={_release(_build_info.TORCH_VERSION)}."
        )
    try:
        from . import _nansense  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"nansense's native engine (nansense/_nansense) failed to load against torch {torch.__version__} "
            f"from {torch.__file__}: {e}. Reinstall nansense for this torch."
        ) from e
