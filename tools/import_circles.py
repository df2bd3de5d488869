#!/usr/bin/env python3
"""Prints the file-level import circles of every crate in the workspace.

A file imports another when it names something the other defines: through
a `use` (a re-export is followed to the file that defines the name, so a
module that only hands names on is not a hub of false circles), or through
a path in its code (`crate::live::LiveFeed`, `super::group::put`, or an
alias a `use` made). Comments, strings and `#[cfg(test)]` modules are left
out: tests may import whatever they test. A circle is a set of two or more
files that reach each other through such imports (a strongly connected
component of the graph); for each, the imports that tie it are listed.

Usage: python3 tools/import_circles.py [REPO]   (exit 1 when a circle is found)

Each crate's `# Layout` section promises that its files import only files
listed after them; this is the check that holds it to that promise.
"""

import os
import re
import sys
from collections import defaultdict

ITEM = re.compile(
    r"\b(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+|extern\s+\"C\"\s+)*"
    r"(?:struct|enum|fn|trait|type|const|static|union|mod|macro_rules!)\s+([A-Za-z_]\w*)"
)
PATH_IN_CODE = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_]\w*)+)")
ALIAS_PATH = re.compile(r"(?<![:\w])([A-Za-z_]\w*)((?:::[A-Za-z_]\w*)+)")
USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
MOD_DECL = re.compile(r'(?:#\[path\s*=\s*"([^"]+)"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


def strip(text):
    """Source without comments, string and char literals (kept as blanks)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and re.match(r"'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12])):
            j = text.find("'", i + 1 + (1 if text[i + 1] == "\\" else 0))
            i = j + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Removes `#[cfg(test)]`-gated inline modules and items; returns the
    code and the names of file modules declared under `#[cfg(test)]`."""
    test_files = set()
    out, i = [], 0
    pat = re.compile(r"#\[cfg\((?:test|all\(test[^)]*\))\)\]\s*")
    while True:
        m = pat.search(code, i)
        if not m:
            out.append(code[i:])
            break
        out.append(code[i:m.start()])
        j = m.end()
        # Skip further attributes.
        while code.startswith("#[", j):
            depth, k = 0, j
            while k < len(code):
                if code[k] == "[":
                    depth += 1
                elif code[k] == "]":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            j = k + 1
            while j < len(code) and code[j].isspace():
                j += 1
        decl = MOD_DECL.match(code, j)
        if decl:
            test_files.add(decl.group(2))
            i = decl.end()
            continue
        # An item: up to its matching brace (or its semicolon).
        k, depth = j, 0
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif code[k] == ";" and depth == 0:
                k += 1
                break
            k += 1
        i = k
    return "".join(out), test_files


class Crate:
    def __init__(self, root, src_dir, roots):
        self.root = root
        self.src = src_dir
        self.files = {}  # module path (tuple) -> file
        self.mod_of = {}  # file -> module path
        self.code = {}
        self.defs = defaultdict(set)
        self.reexports = defaultdict(dict)  # file -> name -> full path
        self.globs = defaultdict(list)  # file -> [full module path]
        self.aliases = defaultdict(dict)  # file -> alias -> full path
        self.uses = defaultdict(list)  # file -> [(full path, is_pub)]
        for r in roots:
            self.load(os.path.join(src_dir, r), ())

    def load(self, path, modpath):
        if not os.path.exists(path) or path in self.mod_of:
            return
        raw = open(path, encoding="utf-8").read()
        code, test_mods = drop_test_modules(strip(raw))
        self.files[modpath] = path
        self.mod_of[path] = modpath
        self.code[path] = code
        here = os.path.dirname(path)
        base = os.path.basename(path)
        own_dir = here if base in ("mod.rs", "lib.rs", "main.rs") else os.path.join(here, base[:-3])
        for m in MOD_DECL.finditer(code):
            explicit, name = m.group(1), m.group(2)
            if name in test_mods:
                continue
            if explicit:
                child = os.path.normpath(os.path.join(here, explicit))
            else:
                child = os.path.join(own_dir, name + ".rs")
                if not os.path.exists(child):
                    child = os.path.join(own_dir, name, "mod.rs")
            self.load(child, modpath + (name,))

    def absolute(self, f, segs):
        """A path as written in file `f` → an absolute module path (list), or
        None for an external crate."""
        here = list(self.mod_of[f])
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] == "self":
            return here + segs[1:]
        if segs[0] == "super":
            k = 0
            while k < len(segs) and segs[k] == "super":
                k += 1
            return here[: len(here) - k] + segs[k:]
        if segs[0] in self.aliases[f]:
            return self.aliases[f][segs[0]] + segs[1:]
        if tuple(here + [segs[0]]) in self.files:
            return here + segs
        return None

    def parse_uses(self):
        for f, code in self.code.items():
            for m in USE.finditer(code):
                is_pub = m.group(1) is not None
                tree = re.sub(r"\s+as\s+", " as ", m.group(2).strip())
                tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
                for segs, alias in expand(tree):
                    full = self.absolute(f, segs)
                    if full is None:
                        continue
                    if segs[-1] == "*":
                        if is_pub:
                            self.globs[f].append(full[:-1])
                        self.uses[f].append((full[:-1] + ["*"], is_pub))
                        continue
                    self.aliases[f][alias] = full
                    if is_pub:
                        self.reexports[f][alias] = full
                    self.uses[f].append((full, is_pub))
            for m in ITEM.finditer(code):
                self.defs[f].add(m.group(1))

    def resolve(self, full, depth=0):
        """The file defining the item a full path names (or the module file
        itself for a module path)."""
        if depth > 8:
            return None
        k = 0
        while k < len(full) and tuple(full[: k + 1]) in self.files:
            k += 1
        mod = self.files.get(tuple(full[:k]))
        if mod is None:
            return None
        rest = full[k:]
        if not rest:
            return mod
        name = rest[0]
        if name in self.defs[mod]:
            return mod
        if name in self.reexports[mod]:
            target = self.reexports[mod][name]
            if target != full:
                return self.resolve(target + rest[1:], depth + 1) or mod
        for g in self.globs[mod]:
            t = self.resolve(g + rest, depth + 1)
            if t is not None and t != mod:
                return t
        return mod

    def edges(self):
        out = defaultdict(lambda: defaultdict(set))  # a -> b -> names
        for f, code in self.code.items():
            for full, is_pub in self.uses[f]:
                if is_pub or not full or full[-1] == "*":
                    continue  # re-exports hand names on; globs name no item
                t = self.resolve(full)
                if t and t != f:
                    out[f][t].add(full[-1])
            for m in PATH_IN_CODE.finditer(code):
                segs = m.group(1).split("::")
                full = self.absolute(f, segs)
                t = full and self.resolve(full)
                if t and t != f:
                    out[f][t].add(segs[-1])
            for m in ALIAS_PATH.finditer(code):
                head = m.group(1)
                if head in ("crate", "super", "self") or head not in self.aliases[f]:
                    continue
                segs = [head] + m.group(2).split("::")[1:]
                full = self.absolute(f, segs)
                t = full and self.resolve(full)
                if t and t != f:
                    out[f][t].add(segs[-1])
        return out


def expand(tree):
    """`a::{b, c::d as e}` → [(segs, alias)]."""

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        return parts

    def walk(prefix, s):
        s = s.strip()
        if s.startswith("::"):
            s = s[2:]
        b = s.find("{")
        if b >= 0:
            head = s[:b].rstrip(":")
            base = prefix + [p for p in head.split("::") if p]
            for part in split_top(s[b + 1:s.rfind("}")]):
                yield from walk(base, part)
            return
        alias = None
        if " as " in s:
            s, alias = [x.strip() for x in s.split(" as ", 1)]
        segs = prefix + [p for p in s.split("::") if p]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        if not segs:
            return
        yield segs, (alias if alias not in (None, "_") else segs[-1])

    return list(walk([], tree))


def circles(graph):
    """Strongly connected components of two or more files (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(graph) | {b for a in graph for b in graph[a]}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crates(repo):
    for d in sorted(os.listdir(repo)):
        path = os.path.join(repo, d) if d != "." else repo
        if os.path.isfile(os.path.join(path, "Cargo.toml")) and os.path.isdir(os.path.join(path, "src")):
            roots = [r for r in ("lib.rs", "main.rs") if os.path.exists(os.path.join(path, "src", r))]
            yield d, Crate(path, os.path.join(path, "src"), roots)
    if os.path.exists(os.path.join(repo, "src", "main.rs")):
        yield "(root)", Crate(repo, os.path.join(repo, "src"), ["main.rs"])


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    found = 0
    for name, crate in crates(repo):
        crate.parse_uses()
        graph = crate.edges()
        comps = circles(graph)
        rel = lambda p: os.path.relpath(p, repo)
        if not comps:
            print(f"{name}: {len(crate.files)} files, no import circle")
            continue
        for comp in comps:
            found += 1
            members = set(comp)
            print(f"{name}: circle of {len(comp)} files: {', '.join(rel(f) for f in comp)}")
            for a in comp:
                for b, names in sorted(graph[a].items()):
                    if b in members:
                        print(f"  {rel(a)} -> {rel(b)}: {', '.join(sorted(names))}")
    if found:
        print(f"{found} import circle(s)")
        sys.exit(1)


if __name__ == "__main__":
    main()
