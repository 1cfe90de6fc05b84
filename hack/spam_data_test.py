#!/usr/bin/env python3
"""Tests hack/spam_data.py on worker/testdata/spam (a five-e-mail corpus in the package's layout)
and hack/spam-data.sh's argument handling. Standard library only; run by ctest (spam_data_test)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "worker", "testdata", "spam")


def run(out, seed=42):
    subprocess.run([sys.executable, os.path.join(HERE, "spam_data.py"), "--data", FIXTURE,
                    "--out", out, "--seed", str(seed)], check=True)
    rows = {}
    for name in ("train", "eval"):
        with open(os.path.join(out, name + ".jsonl"), encoding="utf-8") as f:
            rows[name] = [json.loads(line) for line in f]
    return rows


class SpamData(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.rows = run(self.tmp.name)
        self.by_id = {r["id"]: r for rs in self.rows.values() for r in rs}

    def tearDown(self):
        self.tmp.cleanup()

    def test_split_and_labels(self):
        self.assertEqual(len(self.by_id), 5)
        # 3 ham -> 1 eval (0.6 rounds up), 2 spam -> 0 eval (0.4 rounds down).
        self.assertEqual(sorted(r["label"] for r in self.rows["eval"]), ["ham"])
        self.assertEqual(len(self.rows["train"]), 4)
        self.assertEqual(self.by_id["spam-1/00001.b.txt"]["label"], "spam")
        self.assertEqual(self.by_id["easy-ham-1/00001.a.txt"]["label"], "ham")

    def test_quoted_printable_and_encoded_subject(self):
        t = self.by_id["easy-ham-1/00001.a.txt"]["text"]
        self.assertTrue(t.startswith("Subject: Caf\u00e9 meeting\nFrom: Alice <alice@example.org>\n\n"))
        self.assertIn("at the caf\u00e9 at 3pm.", t)
        self.assertIn("soft wrapped", t)  # QP soft line break joined
        self.assertNotIn("=20", t)

    def test_multipart_prefers_plain_base64_and_drops_attachment(self):
        t = self.by_id["spam-1/00001.b.txt"]["text"]
        self.assertIn("Gro\u00dfe Angebote nur heute!", t)
        self.assertNotIn("TVqQ", t)  # attachment
        self.assertNotIn("HERE", t)  # the HTML alternative is not used when plain exists

    def test_html_only_is_stripped(self):
        t = self.by_id["spam-1/00002.c.txt"]["text"]
        self.assertIn("Cheap meds", t)
        for junk in ("<", "FONT", "hidden comment"):
            self.assertNotIn(junk, t)

    def test_broken_input_survives(self):
        t = self.by_id["easy-ham-1/00002.d.txt"]["text"]
        self.assertIn("latin-1 byte \u00e9", t)  # unknown charset: falls back to latin-1
        self.assertNotIn("\x00", t)
        self.assertTrue(self.by_id["easy-ham-1/00003.e.txt"]["text"].startswith("Subject: no blank"))

    def test_deterministic_and_seeded(self):
        with tempfile.TemporaryDirectory() as other:
            self.assertEqual(run(other), self.rows)
        ids = set()
        for seed in range(8):  # some seed moves a different ham e-mail into eval
            with tempfile.TemporaryDirectory() as other:
                ids.add(run(other, seed)["eval"][0]["id"])
        self.assertGreater(len(ids), 1)

    def test_script_arguments(self):
        sh = os.path.join(HERE, "spam-data.sh")
        r = subprocess.run(["bash", sh, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--out DIR", r.stdout)
        r = subprocess.run(["bash", sh, "--bogus"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 64)
        self.assertIn("unknown argument '--bogus'", r.stderr)
        r = subprocess.run(["bash", sh, "--seed", "x"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 64)


if __name__ == "__main__":
    unittest.main()
