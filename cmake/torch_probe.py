"""Prints what CMake needs to build against the torch of this interpreter:
one `key=value` line each (cmake/torch.cmake reads them).

Under pip's build isolation the interpreter is the user's (the venv's
python) but its own site-packages are hidden behind the isolated build
environment: then torch is looked up in the interpreter's own site folders,
so the extension is built against the torch the user will import.
"""

import os
import site
import sys
import sysconfig


def import_torch():
    try:
        import torch
        return torch
    except ImportError:
        pass
    # The interpreter's own site folders, with their .pth files processed
    # (a torch installed through one is still that environment's torch).
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if os.path.isdir(path):
            site.addsitedir(path)
    import torch
    return torch


def main():
    try:
        torch = import_torch()
    except ImportError as e:
        print(f"error={sys.executable} cannot import torch: {e}")
        return
    root = os.path.dirname(torch.__file__)
    lib = os.path.join(root, "lib")
    print(f"version={torch.__version__}")
    print(f"root={root}")
    print(f"include={os.path.join(root, 'include')};{os.path.join(root, 'include', 'torch', 'csrc', 'api', 'include')}")
    print(f"lib={lib}")
    print(f"cxx11_abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    print(f"cuda={torch.version.cuda or ''}")
    print(f"has_cuda_lib={int(os.path.exists(os.path.join(lib, 'libtorch_cuda.so')))}")
    print(f"python={sys.executable}")


main()
