"""Runs a command and writes, to ``argv[1]``, when it started and when it ended as this parent
sees it: the wall of the command's process measured from outside (a launcher's view)."""
import json, subprocess, sys, time

start = time.time()
code = subprocess.Popen(sys.argv[2:]).wait()
end = time.time()
with open(sys.argv[1], "w") as out:
    json.dump({"start": start, "end": end, "status": code}, out)
sys.exit(code)
