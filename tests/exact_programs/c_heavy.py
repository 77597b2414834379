"""5. C-heavy code: sorted, json, re and str methods on big inputs, and cheap len/append calls in a loop."""
import json
import os
import re
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
ROUNDS = {"short": 3, "long": 30}[SIZE]
WORD = re.compile(r"[a-z]+[0-9]")


def make_data(n):
    return [(i * 7919) % 100_003 for i in range(n)]


def sort_it(data):
    return sorted(data, reverse=True)


def json_round_trip(data):
    return json.loads(json.dumps({"values": data, "names": [str(v) for v in data[:2000]]}))


def text_work(n):
    text = " ".join(f"word{i % 10} other{i % 7}" for i in range(n))
    found = WORD.findall(text)
    return len(text.upper().replace("WORD", "W").split()) + len(found)


def cheap_calls(data):
    out = []
    for v in data:
        if len(out) < 1_000_000:
            out.append(v)
    return len(out)


def main():
    t = 0
    for _ in range(ROUNDS):
        data = make_data(20_000)
        t += sort_it(data)[0]
        t += len(json_round_trip(data)["values"])
        t += text_work(8_000)
        t += cheap_calls(data[:1_500])
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
