"""Write multiple-choice-10.bin: ten questions of ours in llama.cpp's multiple-choice format (what
tools/perplexity's multiple_choice_score reads): uint32 task count, uint32 byte offset of each task, then per task
the question, mc1 (answers and int32 labels, one label 1) and mc2 (empty here); strings as uint32 size + bytes,
everything little-endian.

    python tests/reference/tasks/make_multiple_choice.py   # from the repository root
"""

import struct
from pathlib import Path

TASKS = [
    ("What is the capital of France?", ["Paris", "London", "Berlin", "Madrid"], 0),
    ("Which animal says moo?", ["A cat", "A cow", "A duck"], 1),
    ("What color is the sky on a clear day?", ["Green", "Red", "Blue", "Purple", "Black"], 2),
    ("How many legs does a spider have?", ["Six", "Eight"], 1),
    ("What do bees make?", ["Milk", "Bread", "Honey", "Silk"], 2),
    ("Which planet do we live on?", ["Mars", "Venus", "Jupiter", "Earth"], 3),
    ("What is frozen water called?", ["Ice", "Steam", "Sand"], 0),
    ("Which of these is a fruit?", ["A carrot", "A potato", "An apple", "An onion"], 2),
    ("What do you use to write on paper?", ["A spoon", "A pen", "A shoe"], 1),
    ("How many days are in a week?", ["Five", "Six", "Seven", "Ten"], 2),
]


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def _task(question: str, answers: list[str], right: int) -> bytes:
    mc1 = struct.pack("<I", len(answers)) + b"".join(map(_string, answers)) + \
        struct.pack(f"<{len(answers)}i", *[int(i == right) for i in range(len(answers))])
    return _string(question) + mc1 + struct.pack("<I", 0)


blobs = [_task(*t) for t in TASKS]
offset = 4 + 4 * len(blobs)
positions = []
for b in blobs:
    positions.append(offset)
    offset += len(b)
data = struct.pack("<I", len(blobs)) + struct.pack(f"<{len(blobs)}I", *positions) + b"".join(blobs)
(Path(__file__).parent / "multiple-choice-10.bin").write_bytes(data)
