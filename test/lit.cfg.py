# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "MDL"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mdl", ".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mdl_obj_root, "test")
# Inputs of tests are not tests themselves.
config.excludes = ["Inputs", "Fuzz", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt",
                   "check_corpus.py", "reference.py", "roundtrip.py",
                   "run_examples.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%models", os.path.join(config.mdl_src_root, "models")))
config.substitutions.append(("%configs", os.path.join(config.mdl_src_root, "models", "configs")))
config.substitutions.append(("%mdl_src", config.mdl_src_root))
config.substitutions.append(("%python", "/usr/bin/python3"))
# Real model data (configs, weight inventories) copied into the tree.
# Compiling generated code in tests: the host compiler with the warnings
# generated code must pass, and the runtime library.
# In a sanitizer build the runtime is instrumented, and so are the test
# programs that link it.
sanitize = config.mdl_sanitize in ("ON", "1", "TRUE", "YES")
sanitize_flags = " -fsanitize=address,undefined -fno-sanitize-recover=undefined" if sanitize else ""
config.substitutions.append(("%cxx", config.host_cxx + " -std=c++17 -Wall -Wextra -Werror -fexceptions" + sanitize_flags + " -I" + os.path.join(config.mdl_src_root, "include")))
config.substitutions.append(("%mdl_runtime", config.mdl_runtime_lib + " -lpthread"))
config.substitutions.append(("%mdl_obj", config.mdl_obj_root))
config.substitutions.append(("%host_cxx", config.host_cxx))
config.substitutions.append(("%inputs", os.path.join(config.mdl_src_root, "test", "Inputs")))

# The editor grammar's test needs node and the npm modules the build
# installs (test/CMakeLists.txt).
import shutil
npm_modules = os.path.join(config.mdl_obj_root, "test", "Editors", "npm", "node_modules")
config.substitutions.append(("%npm_modules", npm_modules))
if not shutil.which("node"):
    lit_config.note("editor grammar test unsupported: node is not on PATH")
elif not all(os.path.isdir(os.path.join(npm_modules, m)) for m in ("vscode-textmate", "vscode-oniguruma")):
    lit_config.note("editor grammar test unsupported: vscode-textmate and vscode-oniguruma are not installed in " + npm_modules + " (the build installs them with npm ci)")
else:
    config.available_features.add("vscode-textmate")

# Rendering the plan picture of the docs.
if shutil.which("rsvg-convert"):
    config.available_features.add("rsvg-convert")
else:
    lit_config.note("plan picture rendering test unsupported: rsvg-convert (librsvg2-bin) is not on PATH")

# Conversions spread over an MPI job: mdl-convert built with MPI, and mpirun.
if config.mdl_have_mpi not in ("ON", "1", "TRUE", "YES"):
    lit_config.note("MPI test unsupported: mdl-convert was built without MPI (install libopenmpi-dev)")
elif not shutil.which("mpirun"):
    lit_config.note("MPI test unsupported: mpirun (openmpi-bin) is not on PATH")
else:
    config.available_features.add("mpi")

# The Python package: built (pybind11-dev), and torch and pytest for its
# tests (python3-torch, python3-pytest).
import subprocess
if config.mdl_have_python not in ("ON", "1", "TRUE", "YES"):
    lit_config.note("Python package tests unsupported: the package was not built (install pybind11-dev and python3-dev)")
elif subprocess.run(["/usr/bin/python3", "-c", "import torch, pytest, numpy"],
                    capture_output=True).returncode:
    lit_config.note("Python package tests unsupported: /usr/bin/python3 lacks torch, pytest or numpy (python3-torch, python3-pytest)")
else:
    config.available_features.add("python-package")

llvm_config.use_default_substitutions()
llvm_config.with_system_environment(["HOME", "TMPDIR"])

tool_dirs = [config.mdl_tools_dir, config.llvm_tools_dir]
tools = ["mdlc", "mdl-opt", "mdl-safetensors", "mdl-convert"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.mdl_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

if sanitize:
    # Debian's LLVM/MLIR libraries are not instrumented, but LLVM headers
    # poison arena memory when they see a sanitizer build: the two disagree,
    # so manual poisoning is turned off. Leaks in MLIR's static singletons
    # are not ours to fix.
    config.environment["ASAN_OPTIONS"] = "detect_leaks=0:allow_user_poisoning=0"
    config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
