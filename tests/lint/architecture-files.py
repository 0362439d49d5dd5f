#!/usr/bin/env python3
# Every source file of src/ and cuda/ is named in ARCHITECTURE.md's module
# table, in the row of its folder (src/<area>/ -> row "<area>", src/ -> row
# "(top)", cuda/ -> row "cuda/", cuda/emu/ -> row "cuda/emu/"): by its stem
# (attend_kernels for attend_kernels.c/.h), its file name, or a glob
# (backend_cuda*).  A *_impl.h / *_internal.h header counts as its module's.
# Lists what it misses; exit 1 on any.  Usage: architecture-files.py [ROOT]
import fnmatch, os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else '.'
rows = {}
for line in open(os.path.join(root, 'ARCHITECTURE.md'), encoding='utf-8'):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) < 3 or not line.startswith('|') or cells[0] in ('area', '---'):
        continue
    rows[cells[0].strip('`')] = [t.strip().strip('`') for t in cells[1].split(',') if t.strip()]
missing = []
for top in ('src', 'cuda'):
    for dp, dn, fn in os.walk(os.path.join(root, top)):
        dn[:] = [d for d in dn if d != 'node_modules']
        rel_dir = os.path.relpath(dp, root)
        if rel_dir == 'src':
            area = '(top)'
        elif rel_dir.startswith('src/'):
            area = rel_dir[4:]
        else:
            area = rel_dir + '/'
        for f in sorted(fn):
            stem, ext = os.path.splitext(f)
            if ext not in ('.c', '.h', '.cu', '.cuh', '.cpp', '.py', '.js', '.html'):
                continue
            for suf in ('_impl', '_internal'):
                if stem.endswith(suf):
                    stem = stem[:-len(suf)]
            toks = rows.get(area, [])
            if not any(fnmatch.fnmatch(stem, t) or fnmatch.fnmatch(f, t) for t in toks):
                missing.append('%s/%s (row "%s")' % (rel_dir, f, area))
for m in missing:
    print('not in ARCHITECTURE.md:', m)
print('architecture-files: %d source files not named in their row' % len(missing))
sys.exit(1 if missing else 0)
