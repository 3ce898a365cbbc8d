"""Hand-made mutants of data/checkpoint.py and ckptfile.py: each is applied to a copy of src/ and the checkpoint
unit tests run against it; a mutant the tests pass is reported SURVIVED.

    .venv/bin/python scripts/mutate_checkpoint.py [M1 M5 ...]
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WT = Path(__file__).resolve().parents[1]
PY = sys.executable
TESTS = ["tests/unit/data/test_checkpoint.py", "tests/unit/data/test_ckptfile.py"]
C, F = "src/nimbus/data/checkpoint.py", "src/nimbus/data/ckptfile.py"
MUTANTS = {
    "M1 skip sha check": (C, "if hashlib.sha256(data).hexdigest() != digest:",
                          "if False and hashlib.sha256(data).hexdigest() != digest:"),
    "M2 skip file fsync": (C, "        os.fsync(handle.fileno())", "        pass"),
    "M3 copy instead of atomic rename": (C, "os.rename(tmp, final)", "shutil.copytree(tmp, final)"),
    "M4 keep-last-N off by one": (C, "[:-self.keep]", "[:-self.keep - 1]"),
    "M5 fallback walks oldest first": (C, "for path in reversed(candidates):", "for path in candidates:"),
    "M6 manifest round read from policy_version": (C, 'round=manifest["round"]', 'round=manifest["policy_version"]'),
    "M7 skip parent dir fsync": (C, "    _fsync_dir(self.directory)", "    pass"),
    "M8 incompatible newest skipped silently": (C, 'if "format version" in str(exc):', 'if False:'),
    "M9 no temp cleanup on failure": (C, ["shutil.rmtree(tmp, ignore_errors=True)\n            raise",
                                          "shutil.rmtree(tmp, ignore_errors=True)\n            if isinstance"],
                                      ["raise", "if isinstance"]),
    "M13 manifest keys unchecked": (C, "for key, kind in MANIFEST_TYPES.items():", "for key, kind in {}.items():"),
    "M14 keep-last-N keeps one fewer": (C, "[:-self.keep]", "[:-self.keep + 1]"),
    "M10 order by name": (C, "key=_round_of", ""),
    "M11 extras lose their names": (F, 'arrays[EXTRA_PREFIX + extras[-1]] = array', 'arrays[extras[-1]] = array'),
    "M12 env_steps from episodes": (C, 'env_steps=manifest["env_steps"]', 'env_steps=manifest["episodes"]'),
}

def main() -> None:
    only = sys.argv[1:]
    for name, (rel, old, new) in MUTANTS.items():
        if only and not any(name.startswith(o) for o in only):
            continue
        text = (WT / rel).read_text()
        olds, news = (old, new) if isinstance(old, list) else ([old], [new])
        found = [i for i, o in enumerate(olds) if o in text]
        if not found:
            print(f"{name}: NOT APPLICABLE (pattern absent)")
            continue
        old, new = olds[found[0]], news[found[0]]
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(WT / "src", Path(tmp) / "src")
            (Path(tmp) / rel).write_text(text.replace(old, new, 1))
            proc = subprocess.run([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS], cwd=WT,
                                  env={**os.environ, "PYTHONPATH": f"{tmp}/src"}, capture_output=True,
                                  text=True)
            verdict = "KILLED" if proc.returncode != 0 else "SURVIVED"
            failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
            print(f"{name}: {verdict} {failed[:1]}", flush=True)

main()
