#!/usr/bin/env python3
# The include graph of src/ and cuda/: a module is a .c with its .h (and its
# _impl.h/_internal.h); it reports every circle between modules, every circle
# between folders, and every include from src/util to a folder above it.
# Exit 1 on any.  Usage: include-graph.py [ROOT]
import os,re,sys,collections
root=sys.argv[1] if len(sys.argv)>1 else '.'
files=[]
for d in ('src','cuda'):
    for dp,dn,fn in os.walk(os.path.join(root,d)):
        if '/emu' in dp: pass
        for f in fn:
            if f.endswith(('.c','.h','.cu','.cuh')): files.append(os.path.relpath(os.path.join(dp,f),root))
byname=collections.defaultdict(list)
for f in files: byname[os.path.basename(f)].append(f)
inc=re.compile(r'^\s*#\s*include\s*"([^"]+)"')
def resolve(src,h):
    cand=os.path.normpath(os.path.join(os.path.dirname(src),h))
    if cand in files: return cand
    for d in ('src','cuda'):
        c=os.path.normpath(os.path.join(d,h))
        if c in files: return c
    b=byname.get(os.path.basename(h))
    return b[0] if b and len(b)==1 else None
def node(f):
    d=os.path.dirname(f); s=os.path.splitext(os.path.basename(f))[0]
    for suf in ('_impl','_internal'):
        if s.endswith(suf): s=s[:-len(suf)]
    return d+'/'+s
edges=collections.defaultdict(set); dedges=collections.defaultdict(set)
for f in files:
    for line in open(os.path.join(root,f),errors='replace'):
        m=inc.match(line)
        if not m: continue
        t=resolve(f,m.group(1))
        if not t: continue
        a,b=node(f),node(t)
        if a!=b: edges[a].add(b)
        da,db=os.path.dirname(f),os.path.dirname(t)
        if da!=db: dedges[da].add((db,f,t))
def sccs(g):
    idx={};low={};st=[];on=set();out=[];c=[0]
    nodes=set(g)|{b for v in g.values() for b in v}
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
        for w in g.get(v,()):
            if w not in idx: sc(w);low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            comp=[]
            while True:
                w=st.pop();on.discard(w);comp.append(w)
                if w==v:break
            if len(comp)>1: out.append(sorted(comp))
    for v in sorted(nodes):
        if v not in idx: sc(v)
    return out
bad=0
for comp in sccs(edges): print('module circle:',' '.join(comp)); bad+=1
dg={a:{b for b,_,_ in v} for a,v in dedges.items()}
for comp in sccs(dg):
    print('folder circle:',' '.join(comp)); bad+=1
    for a in comp:
        for b,f,t in sorted(dedges[a]):
            if b in comp: print('   ',f,'->',t)
for b,f,t in sorted(dedges.get('src/util',())):
    print('arrow up from util:',f,'->',t); bad+=1
print('include graph:',len(files),'files,',len(edges),'modules with includes,',bad,'problems')
sys.exit(1 if bad else 0)
