"""An MLD child (plain Python, no library) that asks for the checkpoints listed in the
JSON file $KCL_SCRIPT: {"<action>#<n>": [[seq, sub], ...]} for the n-th such action
(1-based).  Every answer is appended to $KCL_TEST_OUT as "ANSWER action#n seq sub error"."""

import json
import os
import sys

script = json.load(open(os.environ["KCL_SCRIPT"]))
out = open(os.environ["KCL_TEST_OUT"], "a", buffering=1)
counts: dict[str, int] = {}
for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    action = msg["action"]
    counts[action] = counts.get(action, 0) + 1
    tag = f"{action}#{counts[action]}"
    for seq, sub in script.get(tag, []):
        sys.stdout.write(json.dumps({"action": "checkpoint", "sequenceNumber": seq, "subSequenceNumber": sub}) + "\n")
        sys.stdout.flush()
        answer = json.loads(sys.stdin.readline())
        out.write(f"ANSWER {tag} {answer['sequenceNumber']} {answer['subSequenceNumber']} {answer['error']}\n")
    sys.stdout.write(json.dumps({"action": "status", "responseFor": action}) + "\n")
    sys.stdout.flush()
