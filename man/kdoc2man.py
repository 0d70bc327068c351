#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""man/kdoc2man.py - man pages from coord's header comments (issue 26).

Section 3: every kernel-doc block of the public headers,

    /**
     * coord_schedule() - queue one call of @fn with @args on any worker (S1).
     * @c:    coordinator.
     * ...free text...
     * Concurrency: ...
     * Return: ...
     */
    COORD_API int coord_schedule(...);

becomes coord_schedule.3 (NAME, SYNOPSIS with the header and the
declaration that follows the block, DESCRIPTION, ARGUMENTS or MEMBERS,
CONCURRENCY, RETURN VALUE, SEE ALSO the coord_* functions it names); a
`struct name - ...` block becomes name.3 with the struct's definition.

Section 1: `--tool NAME --summary TEXT` turns a tool's --help text (stdin)
into NAME.1: its usage lines as the SYNOPSIS, its option list as OPTIONS.

    kdoc2man.py --list HEADER...             page file names, one a line
    kdoc2man.py --outdir DIR --version V HEADER...
    kdoc2man.py --tool NAME --summary TEXT --version V --out FILE (--help-from EXE | < help.txt)

Python 3 standard library only (Debian's python3).
"""
import argparse
import os
import re
import sys

DATE = "2026"
SECTION_LABELS = {"Return": "RETURN VALUE", "Concurrency": "CONCURRENCY"}


def esc(text):
    """Escape text for a roff text line."""
    text = text.replace("\\", "\\e")
    text = text.replace("-", "\\-")
    return text


def inline(text):
    """Escape, then mark @params in italics and function() names in bold."""
    out = esc(text)
    out = re.sub(r"@(\w+)", r"\\fI\1\\fP", out)
    out = re.sub(r"\b(\w+)\(\)", r"\\fB\1\\fP()", out)
    out = re.sub(r"`([^`]+)`", r"\\fB\1\\fP", out)
    return out


def lines_out(paragraph_lines, cap=False):
    """Lines of a paragraph, joined, as roff text (no line starts with . or ');
    @cap: its first letter upper-case (a sentence)."""
    text = " ".join(l.strip() for l in paragraph_lines if l.strip())
    if not text:
        return []
    if cap and text[0].islower() and not re.match(r"\w+\(\)", text):
        text = text[0].upper() + text[1:]
    text = inline(text)
    if text[0] in ".'":
        text = "\\&" + text
    return [text]


class Block:
    def __init__(self, header, name, kind, summary, params, body, sections, decl):
        self.header = header  # "coord/coord.h"
        self.name = name
        self.kind = kind  # "function" or "struct"
        self.summary = summary  # list of lines
        self.params = params  # [(names, [lines])]
        self.body = body  # list of paragraphs (lists of lines)
        self.sections = sections  # {"RETURN VALUE": [lines], ...}
        self.decl = decl  # the declaration text


HEAD_RE = re.compile(r"^(?:(struct|enum|union)\s+)?(\w+)(\(\))?\s+-\s*(.*)$")
PARAM_RE = re.compile(r"^@(\w+(?:\s*,\s*@\w+)*):\s*(.*)$")
LABEL_RE = re.compile(r"^(Return|Concurrency):\s*(.*)$")


def decl_after(src, pos):
    """The declaration that follows a comment: to `;` (a prototype), or the
    body `{...};` of a struct, or `{...}` of an inline function."""
    rest = src[pos:]
    m = re.match(r"\s*", rest)
    rest = rest[m.end():]
    depth, out = 0, []
    for i, ch in enumerate(rest):
        out.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and not rest[i + 1:].lstrip().startswith(";"):
                return "".join(out)
        elif ch == ";" and depth == 0:
            return "".join(out)
    return "".join(out)


def prototype(decl):
    """A function's prototype for the SYNOPSIS: attributes dropped, an inline
    body turned into `;`, whitespace normalized."""
    d = decl
    if "{" in d:
        d = d[: d.index("{")]
    d = re.sub(r"\bCOORD_(API|NODISCARD)\b", "", d)
    d = re.sub(r"\bCOORD_PRINTF\([^)]*\)", "", d)
    d = re.sub(r"\bstatic\s+inline\b", "", d)
    d = re.sub(r"\s+", " ", d).strip().rstrip(";").strip()
    d = re.sub(r"\(\s+", "(", d)
    d = re.sub(r"\s+\)", ")", d)
    return d + ";"


def wrap_proto(p, width=72):
    """A long prototype as lines, its arguments aligned after the "("."""
    if len(p) <= width or "(" not in p:
        return [p]
    head, args = p.split("(", 1)
    indent = " " * (len(head) + 1)
    lines, cur = [], head + "("
    for a in args.split(", "):
        piece = a if cur.endswith("(") else ", " + a
        if len(cur) + len(piece) > width and not cur.endswith("("):
            lines.append(cur + ",")
            cur = indent + a
        else:
            cur += piece
    lines.append(cur)
    return lines


def parse_header(path, incname):
    src = open(path, encoding="utf-8").read()
    blocks = []
    for m in re.finditer(r"/\*\*(.*?)\*/", src, re.S):
        raw = m.group(1)
        lines = [re.sub(r"^\s*\* ?", "", l) for l in raw.split("\n")]
        # a one-line block: "/** name() - summary */"
        lines = [l.rstrip() for l in lines]
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:
            continue
        h = HEAD_RE.match(lines[0].strip())
        if not h:
            continue
        kind = "struct" if h.group(1) == "struct" else ("function" if h.group(3) else None)
        decl = decl_after(src, m.end())
        if kind is None and decl.startswith("typedef"):
            kind = "typedef"
        if kind is None:
            continue  # enums, notes: described in the pages that use them
        name = h.group(2)
        summary = [h.group(4)]
        i = 1
        while i < len(lines) and lines[i].strip() and not PARAM_RE.match(lines[i].strip()) \
                and not LABEL_RE.match(lines[i].strip()):
            summary.append(lines[i])
            i += 1
        params, body, sections = [], [], {}
        cur = None  # list being filled
        para = []
        for l in lines[i:]:
            s = l.strip()
            pm = PARAM_RE.match(s)
            lm = LABEL_RE.match(s)
            if pm:
                if para:
                    body.append(para)
                    para = []
                names = [n.strip().lstrip("@") for n in pm.group(1).split(",")]
                cur = [pm.group(2)]
                params.append((names, cur))
            elif lm:
                if para:
                    body.append(para)
                    para = []
                cur = [lm.group(2)] if lm.group(2) else []
                sections[SECTION_LABELS[lm.group(1)]] = cur
            elif not s:
                if cur is not None and cur and cur is not para:
                    # a blank line ends a parameter; a section may go on
                    if any(cur is p[1] for p in params):
                        cur = None
                    else:
                        cur.append("")
                        continue
                if para:
                    body.append(para)
                    para = []
                cur = None
            elif cur is not None:
                cur.append(l)
            else:
                para.append(l)
        if para:
            body.append(para)
        blocks.append(Block(incname, name, kind, summary, params, body, sections, decl))
    return blocks


def first_sentence(summary):
    text = " ".join(l.strip() for l in summary)
    m = re.match(r"(.+?[.;:])(\s|$)", text)
    s = m.group(1) if m else text
    return s.rstrip(".;:")


def th(name, section, version, manual):
    return ['.TH "%s" "%s" "%s" "coord %s" "%s"' % (name.upper(), section, DATE, version, manual)]


def page3(b, version, known):
    out = th(b.name, "3", version, "coord Library Functions") + [".nh"]
    name_line = first_sentence(b.summary).replace("@", "")
    out += [".SH NAME", "%s \\- %s" % (esc(b.name), esc(name_line))]
    out += [".SH SYNOPSIS", ".nf", ".B #include <%s>" % b.header, ".PP"]
    if b.kind in ("function", "typedef"):
        for l in wrap_proto(prototype(b.decl)):
            out.append("\\fB%s\\fP" % esc(l))
    else:
        for l in b.decl.expandtabs(8).split("\n"):
            l = esc(l.rstrip())
            out.append(("\\&" + l) if l[:1] in ".'" else l)
    out += [".fi"]
    out += [".SH DESCRIPTION"]
    out += lines_out(b.summary, cap=True)
    for p in b.body:
        out += [".PP"] + lines_out(p)
    if b.params:
        out += [".SH " + ("MEMBERS" if b.kind == "struct" else "ARGUMENTS")]
        for names, text in b.params:
            out += [".TP", ", ".join("\\fI%s\\fP" % esc(n) for n in names)]
            paras, cur = [], []
            for l in text:
                if l.strip():
                    cur.append(l)
                elif cur:
                    paras.append(cur)
                    cur = []
            if cur:
                paras.append(cur)
            for k, p in enumerate(paras):
                if k:
                    out.append(".IP")
                out += lines_out(p)
    for label in ("CONCURRENCY", "RETURN VALUE"):
        if label in b.sections:
            out.append(".SH " + label)
            paras, cur = [], []
            for l in b.sections[label]:
                if l.strip():
                    cur.append(l)
                elif cur:
                    paras.append(cur)
                    cur = []
            if cur:
                paras.append(cur)
            for k, p in enumerate(paras):
                if k:
                    out.append(".PP")
                out += lines_out(p, cap=True)
    text = " ".join(" ".join(l) for l in [b.summary] + b.body + [t for _, t in b.params]
                    + list(b.sections.values()))
    refs = []
    for r in re.findall(r"\b(coord_\w+)\(\)", text):
        if r != b.name and r in known and r not in refs:
            refs.append(r)
    if b.kind != "struct":
        for s in re.findall(r"\b(?:struct )?(coord_\w+)", b.decl):
            if s != b.name and s in known and s not in refs:
                refs.append(s)
    if refs:
        out += [".SH SEE ALSO", ", ".join("\\fB%s\\fP(3)" % esc(r) for r in sorted(refs))]
    return "\n".join(out) + "\n"


OPT_RE = re.compile(r"^  (-[^ ]+(?: [A-Z][^ ]*)?)(?:\s{2,}(.*))?$")


def paragraphs(lines):
    paras, cur = [], []
    for l in lines:
        if l.strip():
            cur.append(l)
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def page1(name, summary, version, help_text):
    """A tool's page from its --help: "usage: ..." lines, then paragraphs;
    a paragraph of "  --option ARG   text" lines (continued by deeper
    indented ones) is the OPTIONS list; one starting "Exit status:" is the
    EXIT STATUS; other text goes to the DESCRIPTION before the options and
    to NOTES after them."""
    paras = paragraphs(help_text.split("\n"))
    usage = paras.pop(0) if paras else []
    out = th(name, "1", version, "coord Manual") + [".nh"]
    out += [".SH NAME", "%s \\- %s" % (esc(name), esc(summary))]
    out += [".SH SYNOPSIS", ".nf"]
    for u in usage:
        u = u.rstrip()
        u = u[len("usage: "):] if u.startswith("usage: ") or u.startswith(" " * 7) else u
        out.append(esc(u))
    out += [".fi", ".SH DESCRIPTION"]
    seen_opts, notes, first = False, False, True
    for p in paras:
        if OPT_RE.match(p[0]):
            out.append(".SH OPTIONS")
            seen_opts = True
            for l in p:
                m = OPT_RE.match(l)
                if m:
                    out += [".TP", "\\fB%s\\fP" % esc(m.group(1))]
                    if m.group(2):
                        out += lines_out([m.group(2)])
                else:
                    out += lines_out([l])
        elif p[0].startswith("Exit status:"):
            out += [".SH EXIT STATUS"] + lines_out([p[0][len("Exit status:"):]] + p[1:])
        else:
            if seen_opts and not notes:
                out.append(".SH NOTES")
                notes, first = True, True
            if not first:
                out.append(".PP")
            out += lines_out(p)
            first = False
    out += [".SH SEE ALSO",
            ", ".join("\\fB%s\\fP(%s)" % (esc(n), s) for n, s in
                      (("coord-worker", "1"), ("coord-ps", "1"), ("coord_worker_serve", "3"),
                       ("coord_ps_serve", "3"), ("coord_create", "3")) if n != name)]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--outdir")
    ap.add_argument("--version", default="")
    ap.add_argument("--tool")
    ap.add_argument("--summary")
    ap.add_argument("--out")
    ap.add_argument("--help-from", help="run this tool with --help for the text")
    ap.add_argument("headers", nargs="*")
    a = ap.parse_args()

    if a.tool:
        if a.help_from:
            import subprocess

            help_text = subprocess.run([a.help_from, "--help"], check=True, capture_output=True,
                                       text=True).stdout
        else:
            help_text = sys.stdin.read()
        text = page1(a.tool, a.summary, a.version, help_text)
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
        return 0

    blocks, seen = [], set()
    for h in a.headers:
        for b in parse_header(h, "coord/" + os.path.basename(h)):
            if b.name in seen:
                continue  # the first block of a name wins
            seen.add(b.name)
            blocks.append(b)
    if a.list:
        for b in blocks:
            print(b.name + ".3")
        return 0
    known = {b.name for b in blocks}
    for b in blocks:
        with open(os.path.join(a.outdir, b.name + ".3"), "w", encoding="utf-8") as f:
            f.write(page3(b, a.version, known))
    return 0


if __name__ == "__main__":
    sys.exit(main())
