"""Plain `nvtx` package (0.2.17) workload, run under the real nsys and under our recorder.

push/pop (nested, in two domains), start/end ranges ended on another thread, marks,
categories (by name and by id), colors, payloads of each type, a worker thread, and a
multiprocessing child (spawn) with its own ranges. Deterministic per thread.
"""

import multiprocessing
import threading

import nvtx

CHILD_RANGES = 3


def child():
    for i in range(CHILD_RANGES):
        with nvtx.annotate("child-range", domain="pkg-child", payload=i):
            pass
    nvtx.mark("child-mark", domain="pkg-child")


def worker(ranges):
    with nvtx.annotate("worker-outer", domain="pkg"):
        with nvtx.annotate("worker-inner", domain="pkg", color="green"):
            pass
    for r in ranges:
        nvtx.end_range(r)  # started on the main thread
    nvtx.mark("worker-mark", domain="pkg")


def main():
    nvtx.push_range("outer", domain="pkg", color="blue", category="cat-a")
    nvtx.push_range("inner", domain="pkg", payload=42)
    nvtx.pop_range(domain="pkg")
    nvtx.push_range("inner", domain="pkg", payload=43)
    nvtx.pop_range(domain="pkg")
    nvtx.push_range("other-domain", domain="pkg-b", category=7)
    nvtx.pop_range(domain="pkg-b")
    nvtx.pop_range(domain="pkg")
    with nvtx.annotate("default-domain", color=0xFF112233):
        nvtx.mark("default-mark")
    nvtx.mark("payload-float", domain="pkg", payload=2.5)
    nvtx.mark("payload-int", domain="pkg", payload=-3)
    ranges = [nvtx.start_range("cross-thread", domain="pkg", payload=i) for i in range(2)]
    same = nvtx.start_range("same-thread", domain="pkg", category="cat-b")
    nvtx.end_range(same)
    t = threading.Thread(target=worker, args=(ranges,), name="pkg-worker")
    t.start()
    t.join()
    p = multiprocessing.get_context("spawn").Process(target=child)
    p.start()
    p.join()
    assert p.exitcode == 0, p.exitcode
    print("nvtx_package_workload done")


if __name__ == "__main__":
    main()
