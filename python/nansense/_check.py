"""The import-time check: the extension links one libtorch, and must run
against the torch that loads that same libtorch."""

from . import _build_info


def check_torch() -> None:
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"nansense needs PyTorch: it was built for torch {_build_info.TORCH_VERSION} "
            f"(the python3-torch of {_build_info.PYTHON}), and this Python cannot import torch ({e}). "
            f"Run nansense with {_build_info.PYTHON}."
        ) from e
    if torch.__version__ != _build_info.TORCH_VERSION:
        raise ImportError(
            f"nansense was built for torch {_build_info.TORCH_VERSION} but this Python imports torch "
            f"{torch.__version__} from {torch.__file__}: the native engine must run against the libtorch it "
            f"was linked with. Run it with {_build_info.PYTHON}, or rebuild nansense for this torch "
            "(cmake -DNANSENSE_PYTHON=<this python>)."
        )
    try:
        from . import _nansense  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"nansense's native engine (nansense/_nansense) failed to load against torch {torch.__version__} "
            f"from {torch.__file__}: {e}. Rebuild it (cmake --build build --target nansense_python)."
        ) from e
