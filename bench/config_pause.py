"""bench/config_pause.py: how long writes stall while the config servers' Raft leader is paused (SIGSTOP).

Usage (pymongo in a venv: python3 -m venv /tmp/v && /tmp/v/bin/pip install pymongo):
    /tmp/v/bin/python bench/config_pause.py target/release/shoal LABEL

Starts the default cluster with `shoal up` (ports 27017-27021, data under /tmp/shoal-config-pause), inserts at
w:majority with retryable writes from one client, pauses the config leader for 10 s, and prints
the acknowledgements during the pause and the longest gap between two acknowledgements.
"""
import os, re, signal, subprocess, sys, threading, time, pymongo
binary, label = sys.argv[1], sys.argv[2]
os.makedirs("/tmp/shoal-config-pause", exist_ok=True)
data = f"/tmp/shoal-config-pause/data-{label}"
subprocess.run(["rm", "-rf", data])
log = open(f"/tmp/shoal-config-pause/up-{label}.log", "w")
up = subprocess.Popen([binary, "up", "--data-dir", data], stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd())
for _ in range(120):
    time.sleep(1)
    if "SHOAL_READY cluster" in open(f"/tmp/shoal-config-pause/up-{label}.log").read():
        break
c = pymongo.MongoClient("mongodb://127.0.0.1:27017/?retryWrites=true&w=majority", serverSelectionTimeoutMS=30000)
coll = c.bench.acks
acks, stop = [], False
def writer():
    i = 0
    while not stop:
        try:
            coll.insert_one({"_id": i}); acks.append(time.time()); i += 1
        except Exception as e:
            time.sleep(0.01)
t = threading.Thread(target=writer); t.start()
time.sleep(5)
out = subprocess.run([binary, "reconfig", "--config", "127.0.0.1:27019,127.0.0.1:27020,127.0.0.1:27021"], capture_output=True, text=True).stdout
leader = re.search(r"leader (\d+)", out).group(1)
pid = int(subprocess.run(["pgrep", "-f", f"configsvr --id {leader} .*{data}"], capture_output=True, text=True).stdout.split()[0])
paused_at = time.time(); os.kill(pid, signal.SIGSTOP)
time.sleep(10)
os.kill(pid, signal.SIGCONT); resumed_at = time.time()
time.sleep(8)
stop = True; t.join()
window = [a for a in acks if paused_at - 1 <= a <= resumed_at + 8]
gaps = [(b - a, a - paused_at) for a, b in zip(window, window[1:])]
longest = max(gaps) if gaps else (None, None)
first_after = next((a - paused_at for a in acks if a > paused_at), None)
print(f"{label}: leader {leader} paused 10 s; acks during pause: {sum(1 for a in acks if paused_at < a < resumed_at)}; longest gap {longest[0]:.2f} s starting {longest[1]:.2f} s after the pause")
up.send_signal(signal.SIGINT); up.wait(timeout=60)
