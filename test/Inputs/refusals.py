"""How the tests that give a tool bad input judge its runs: mdlc on the
malformed corpus (Malformed/check_corpus.py), mdl-safetensors on broken
files (Runtime/Inputs/malformed_safetensors.py), mdl-convert on bad inputs
and unsafe command lines (Conversion/Inputs/bad_inputs.py,
Robustness/Inputs/unsafe_conversions.py).

A tool must refuse bad input: exit code 1, a message, nothing on stdout,
no crash, and in time.
"""
import subprocess

# What a crash leaves on stderr: a sanitizer's report, a failed assertion,
# std::terminate, a fatal signal, LLVM's crash handler. ("terminate" alone
# would match an error about an unterminated string.)
CRASH = ("AddressSanitizer", "runtime error:", "Assertion",
         "terminate called", "Segmentation", "Stack dump",
         "PLEASE submit a bug report")


def crashed(stderr):
    return any(c in stderr for c in CRASH)


def run(name, cmd, failures, timeout=120):
    """Runs `cmd` (output as text, undecodable bytes replaced); None, and a
    failure of `name`, when it does not end within `timeout` seconds."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        failures.append(f"{name}: timed out")
        return None


def refusal(name, proc, prefix, failures, one_line=False):
    """The message of `proc`'s refusal: its first line of stderr (its only
    line with `one_line`) after `prefix`. None when `proc` did not refuse
    as it must; what it did instead is added to `failures`."""
    count = len(failures)
    lines = proc.stderr.splitlines()
    if proc.returncode != 1:
        failures.append(f"{name}: exit {proc.returncode}")
    if crashed(proc.stderr):
        failures.append(f"{name}: crashed")
    if proc.stdout:
        failures.append(f"{name}: wrote to stdout")
    if not lines or not lines[0].startswith(prefix) or \
            (one_line and len(lines) != 1):
        failures.append(f"{name}: printed {proc.stderr!r}")
    return lines[0][len(prefix):] if len(failures) == count else None


def summary(count, what, failures):
    """Prints `COUNT WHAT, N failures` and each failure; the exit code."""
    print(f"{count} {what}, {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0
