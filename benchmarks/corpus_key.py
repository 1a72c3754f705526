"""What keying the corpus's id cache by the sha256 of its bytes costs: the hash against a load from
the cache and against encoding the text again.

    python benchmarks/corpus_key.py --corpus ../shared/data/tinyshakespeare.txt [--mb 100] [--json OUT]

Two files in a temporary folder: the corpus as given, and the corpus written over and over to
--mb megabytes. For each, the median of --repeats runs (after one untimed run) of: reading the
bytes and hashing them (the key, paid on every load), a load whose cache matches, and a load
with no cache (read, decode, encode, write the cache).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from tinygpt.data.corpus import file_sha256, load_ids


def median_s(work, repeats: int) -> float:
    work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(path: Path, repeats: int) -> dict:
    cache = path.with_name(path.name + ".ids.pt")

    def uncached():
        cache.unlink(missing_ok=True)
        load_ids(path)

    return {
        "bytes": path.stat().st_size,
        "key_s": median_s(lambda: file_sha256(path), repeats),
        "cached_load_s": median_s(lambda: load_ids(path), repeats),
        "uncached_load_s": median_s(uncached, max(1, repeats // 3)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="a UTF-8 text file")
    parser.add_argument("--mb", type=int, default=100, help="the size of the large copy (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    text = Path(args.corpus).read_bytes()
    results = []
    with tempfile.TemporaryDirectory() as folder:
        small, large = Path(folder) / "corpus.txt", Path(folder) / "large.txt"
        small.write_bytes(text)
        large.write_bytes(text * -(-args.mb * 1_000_000 // len(text)))
        for path in (small, large):
            results.append(measure(path, args.repeats))
            r = results[-1]
            print(
                f"{r['bytes']:>12,} bytes: key {r['key_s'] * 1e3:.1f} ms, cached load "
                f"{r['cached_load_s'] * 1e3:.1f} ms, uncached load {r['uncached_load_s'] * 1e3:.0f} ms"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
