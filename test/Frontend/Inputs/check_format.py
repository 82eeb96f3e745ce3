"""Formats a copy of every spec under a directory with `mdlc format -i` and
checks that formatting keeps the meaning (`mdlc -emit=mlir` of each
formatted file equals the original's; the IR prints no locations) and that
formatting twice changes nothing.
Usage: check_format.py MDLC SRC_DIR WORK_DIR"""
import filecmp
import os
import shutil
import subprocess
import sys

mdlc, src, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
shutil.copytree(src, os.path.join(work, "a"))
specs = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs if f.endswith(".mdl"))
failures = 0


def ir(root, spec):
    r = subprocess.run([mdlc, "-emit=mlir", spec], cwd=root, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


# Once, then a copy of the result again.
subprocess.run([mdlc, "format", "-i"] + [os.path.join(work, "a", s) for s in specs], check=True)
shutil.copytree(os.path.join(work, "a"), os.path.join(work, "b"))
subprocess.run([mdlc, "format", "-i"] + [os.path.join(work, "b", s) for s in specs], check=True)
changed = 0
for s in specs:
    before, after = ir(src, s), ir(os.path.join(work, "a"), s)
    if before != after or before[0] != 0:
        print(f"{s}: the IR of the formatted spec differs (exit {before[0]} vs {after[0]})")
        failures += 1
    if not filecmp.cmp(os.path.join(work, "a", s), os.path.join(work, "b", s), shallow=False):
        print(f"{s}: formatting twice changes it")
        failures += 1
    changed += not filecmp.cmp(os.path.join(src, s), os.path.join(work, "a", s), shallow=False)
print(f"{len(specs)} specs: {failures} failures")
sys.exit(1 if failures else 0)
