"""HTML output (.html): one self-contained page, nothing loaded from the network.

Drawn by a small script from data embedded in the page, in this order (what to look at first, first):

* what the figures are: the mode, the threshold, whether every call was counted, Ocular's own cost per
  event (subtracted from the table's self times), the clock, and the legend of the marks the text report
  uses (``~`` estimated from sampling windows, ``>`` at least: counted until de-instrumented), with the note of what is
  partial (``partial_note``) when something is;
* the top functions by self time, numbers first (self, total, calls, mean), name and short path after:
  at 1,280 x 800 the hottest function's figures are on the first screen;
* the hot loops (iterations, ns and instructions per iteration), each with its disassembly folded under it;
* an icicle (a flame graph, callers above callees) of each thread's call tree: width is total time, a
  click zooms into a frame, the top bar zooms back out; hovering shows calls, total and self;
* every function of the statistics (up to HTML_KEEP, by self time), in pages of PAGE_ROWS rows, with a
  search box (name or path) and sortable columns (click a header); ``page.html#q=TEXT&sort=calls`` opens
  it filtered and sorted.

Paths are shortened: relative to the project directory (the current directory when the user's files are
under it, else their common directory), ``site-packages/...``, ``stdlib/...``; the full path is the title
(hover).  The icicle's times are the call tree's (wall-clock between enter and leave, as the timeline
shows them); the tables subtract Ocular's own cost per event, as the console report does.  If the script
fails, the page says so in a red line (and in the ``data-error`` attribute of <body>), so a broken page
cannot pass for an empty one.
"""

import html
import json
import os
import re

from .. import _ocular
from .._report import _OCULAR_DIR, _STDLIB_DIRS, _STDLIB_RE, _ended_text

MIN_FRACTION = 0.0005  # icicle: frames narrower than this share of their thread are left out
HTML_KEEP = 100000  # function rows the page keeps (by self time): a big program's every function
PAGE_ROWS = 100  # rows of the function table drawn at a time
TOP_ROWS = 10  # the top functions by self time, above everything else
MARK_TITLES = {"~": "estimated (sampling windows)", ">": "at least: counted until de-instrumented"}


def _tree_json(tree):
    threads = []
    for t in tree.threads:
        root = t["root"]
        total = tree.total[root] or 1
        nodes = []  # [name index, parent (index in nodes), calls, total, self]
        index = {root: -1}
        for n, d in tree.walk(root):
            if tree.parent[n] not in index or tree.total[n] < total * MIN_FRACTION:
                continue
            index[n] = len(nodes)
            nodes.append([tree.code[n], index[tree.parent[n]], tree.calls[n], tree.total[n], tree.self_ns[n]])
        threads.append({"name": tree.thread_label(t), "total": tree.total[root], "nodes": nodes})
    names = {}
    for t in threads:
        for nd in t["nodes"]:
            c = nd[0]
            if c not in names:
                file, line, name = tree.func(c)
                names[c] = f"{name} ({file}:{line})" if line else f"{name} ({file})"
    return threads, names


def _report(rendered, with_code):
    from .._report import Report

    mode = "precise" if rendered.get("precise") else "adaptive"
    return Report(_ocular._report_data(with_code, HTML_KEEP), mode, None, rendered.get("clock", ""))


def _marks(f, field):
    """The mark of one figure of a report row, as the text report writes it (Report.marks): "~" estimated,
    ">" a lower bound, "" measured."""
    m = (f.get("marks") or {}).get(field, "measured")
    return {"estimated": "~", "lower_bound": ">"}.get(m, "")


_SITE_RE = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_STDLIB_DIR = _STDLIB_DIRS[0]  # (the report's: this interpreter's standard library, and any interpreter's by _STDLIB_RE)


def project_dir(files, cwd=None):
    """The directory the user's own files are shown relative to: the current directory when one of them
    is under it, else their common directory (None: none, or only / in common)."""
    mine = [f for f in files if os.path.isabs(f) and not _SITE_RE.search(f) and not _STDLIB_RE.search(f)
            and not f.startswith((_STDLIB_DIR, _OCULAR_DIR))]
    if not mine:
        return None
    cwd = os.path.join(cwd or os.getcwd(), "")
    if any(f.startswith(cwd) for f in mine):
        return cwd
    try:
        common = os.path.commonpath([os.path.dirname(f) for f in mine])
    except ValueError:  # (mixed drives)
        return None
    return os.path.join(common, "") if common not in ("", os.sep) else None


def short_path(path, project):
    """A path as the page shows it: relative to the project directory, or from site-packages or the
    standard library on; a C function's "~" (as cProfile names their file) as "C function"; anything
    else ("<frozen ...>", "<string>") as it is."""
    if path == "~":
        return "C function"
    if project and path.startswith(project):
        return path[len(project):]
    if path.startswith(_OCULAR_DIR):
        return "ocular/" + path[len(_OCULAR_DIR):]
    m = None
    for m in _SITE_RE.finditer(path):
        pass
    if m:
        return "site-packages/" + path[m.end():]
    if path.startswith(_STDLIB_DIR):
        return "stdlib/" + path[len(_STDLIB_DIR):]
    m = _STDLIB_RE.search(path)
    if m:
        return "stdlib/" + path[m.end():]
    return path


def _own_cost_text(d):
    """The report's own-cost line, from its dict (to_dict()'s keys)."""
    oc = d.get("own_cost_cycles")
    if oc:
        return (f"own cost subtracted per event, measured at start: call {oc['enter']}+{oc['leave']}, "
                f"C call {oc['ccall']}+{oc['creturn']}, jump {oc['jump']} cycles")
    return f"own cost subtracted: {d.get('overhead_cycles_per_event')} cycles/event (the smallest gap seen)"


def build(tree, rendered, title="Ocular profile", with_code=False, cwd=None):
    """The page.  with_code: the session's code objects are alive (at stop): the loops' disassembly
    shows specialized instructions and arguments, not only the recorded bytecode's base names.
    cwd: the directory paths are shown relative to when the user's files are under it (default: the
    current one)."""
    threads, names = _tree_json(tree)
    rep = _report(rendered, with_code)
    d = rep.to_dict()
    project = project_dir({f["file"] for f in d["functions"]}, cwd)
    files, file_index = [], {}

    def fidx(path):
        i = file_index.get(path)
        if i is None:
            i = file_index[path] = len(files)
            files.append([short_path(path, project), path])
        return i

    # marks as in the text report: ~ estimated (sampling windows), > at least (counted until de-instrumented)
    # row: name, file (index in files), line, calls, self, total, mean, max (ns), the marks of calls, self,
    # total, category
    funcs = [[f["name"], fidx(f["file"]), f["line"], f["calls"], f["self_ns"], f["total_ns"], f["mean_ns"],
              f["max_ns"], _marks(f, "calls"), _marks(f, "self"), _marks(f, "total"), f.get("category", "")]
             for f in d["functions"]]
    loops = [{"function": lp["function"], "file": fidx(lp["file"]), "line": lp["line"],
              "iterations": lp["iterations"],
              # its own time: the loop's instructions, callees excluded (the report ranks loops by it)
              "own_ns": lp.get("own_ns", lp.get("self_ns_per_iteration", 0) * lp.get("timed_iterations", lp["iterations"])),
              "own_estimated": bool(lp.get("own_estimated")), "estimated_iterations": lp.get("estimated_iterations"),
              "ns": lp.get("self_ns_per_iteration", lp["ns_per_iteration"]), "insns": lp["instructions_per_iteration"],
              "sample": bool(lp.get("sample", lp.get("deinstrumented"))),
              "note": lp.get("note"),
              "rows": [[r["offset"], r["line"], r["base"], r["specialized"], r["arg"], r["cycles"], r["ns"]]
                       for r in lp.get("rows") or []]} for lp in d["loops"]]
    sw = d.get("sampling") or {}
    data = {"threads": threads, "names": {str(k): v for k, v in names.items()}, "functions": funcs, "loops": loops,
            "files": files, "project": project or "",
            "mode": d["mode"] + (", near-zero" if d.get("near_zero") else ""), "clock": d.get("clock") or "",
            "ns_per_cycle": d.get("ns_per_cycle"), "overhead": d.get("overhead_cycles_per_event"),
            "own_cost": _own_cost_text(d), "threshold": d["threshold"],
            "exact": "every function call counted and timed" if not d.get("near_zero") else
                     "function starts de-instrumented after the threshold: figures past it are samples or estimates",
            "wall_ns": d.get("wall_ns"), "events": d.get("events"), "dropped": d.get("dropped") or 0,
            "functions_total": d.get("functions_total", len(funcs)),
            "sampling_windows": sw.get("windows", 0),
            "notation": d.get("notation") or {}, "mark_titles": MARK_TITLES,
            "page_rows": PAGE_ROWS, "top_rows": TOP_ROWS,
            "tasks": [[t["tasks"], t["steps"], t["running_ns"], t["mean_step_ns"], t["slowest_step_ns"], t["name"],
                       t["coroutine"], t.get("waiting_ns"), _ended_text(t)] for t in d.get("tasks") or []],
            "stalls": [[s["at_ns"], s["held_ns"], s["task"], " > ".join(
                fr["name"] if fr["file"] == "~" else f"{fr['name']} ({short_path(fr['file'], project)}:{fr['line']})"
                for fr in s["stack"] if fr["file"] != "<asyncio task>")] for s in d.get("stalls") or []],
            "stall_ms": d.get("stall_ms", 100),
            "note": tree.note}
    # inside <script>: no "<" at all (a name holding "<!--" then "<script" would put the HTML parser in a
    # state where the page's own </script> no longer ends the data, and the page would stay blank)
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
    return PAGE.replace("@TITLE@", html.escape(title)).replace("@DATA@", blob)


def write(tree, path, options):
    text = build(tree, options.get("rendered") or {}, with_code=bool(options.get("with_code")))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width">
<title>@TITLE@</title>
<style>
body{font:13px/1.35 system-ui,sans-serif;margin:10px 14px;color:#222}
h1{font-size:16px;margin:0 0 4px}h2{font-size:14px;margin:14px 0 4px}h3{font-size:13px;margin:8px 0 2px}
.ice{position:relative;border:1px solid #ccc;overflow:hidden;margin-bottom:6px}
#flames{max-height:460px;overflow-y:auto}
.fr{position:absolute;height:17px;box-sizing:border-box;border:1px solid #fff;font-size:11px;white-space:nowrap;
overflow:hidden;text-overflow:ellipsis;cursor:pointer;padding:0 2px}
table{border-collapse:collapse}td,th{padding:1px 7px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
td.l,th.l{text-align:left}th{background:#f4f4f4;user-select:none;font-weight:600}
th.s{cursor:pointer}th.s:hover{background:#e6e6e6}th.on{background:#dde6f4}
td.path{max-width:520px;overflow:hidden;text-overflow:ellipsis;color:#555}#looptable td.path{max-width:220px}
td.name{max-width:420px;overflow:hidden;text-overflow:ellipsis}
td.num{font-variant-numeric:tabular-nums}.cat{color:#888;font-size:11px}
.err{color:#fff;background:#c00;padding:4px}.muted{color:#666}.facts{margin:0;color:#333}
.legend{margin:2px 0;color:#555}.mark{color:#b35900;font-weight:600}
#search{width:320px;padding:3px 6px;font:inherit}.pager button{font:inherit;margin:0 3px}
.pager{margin:4px 0}.dis-btn{font:inherit;font-size:11px;padding:0 4px}table.dis td,table.dis th{font-size:12px}
a{color:#335}
pre{margin:0}
</style></head>
<body data-error="">
<h1>@TITLE@</h1>
<div id="error"></div>
<p class="facts" id="mode"></p>
<p class="facts muted" id="cost"></p>
<p class="facts muted" id="facts"></p>
<p class="legend" id="legend"></p>
<p class="facts muted">Below: <a href="#loops-h">hot loops</a> · <a href="#flames-h">call tree</a> ·
<a href="#all-h">all functions (search, sort, pages)</a></p>
<h2>Top functions by self time</h2>
<table id="top"><thead><tr><th>self ms</th><th>total ms</th><th>calls</th><th>mean µs</th>
<th class="l">function</th><th class="l">where</th></tr></thead><tbody></tbody></table>
<h2 id="loops-h">Hot loops</h2>
<div id="loops"></div>
<div id="tasks"></div>
<h2 id="flames-h">Call tree <span class="muted">(icicle: callers above callees; width = total time, wall-clock as in the
timeline; click to zoom)</span></h2>
<div id="flames"></div>
<h2 id="all-h">All functions <span class="muted">(click a header to sort; Ocular's own cost per event subtracted)</span></h2>
<div><input id="search" type="search" placeholder="filter by name or path" aria-label="filter functions by name or path">
<span class="pager" id="pager"></span></div>
<table id="functions"><thead><tr>
<th class="s" data-k="4">self ms</th><th class="s" data-k="5">total ms</th><th class="s" data-k="3">calls</th>
<th class="s" data-k="6">mean µs</th><th class="s" data-k="7">max µs</th><th class="s l" data-k="0">function</th>
<th class="s l" data-k="1">file:line</th>
</tr></thead><tbody></tbody></table>
<div class="pager" id="pager2"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
"use strict";
function fail(msg){document.body.setAttribute("data-error",String(msg));
  var e=document.getElementById("error");e.className="err";e.textContent="page error: "+msg;}
window.addEventListener("error",function(ev){fail(ev.message);});
try{
var D=JSON.parse(document.getElementById("data").textContent);
function $(id){return document.getElementById(id);}
function el(tag,attrs,text){var e=document.createElement(tag);
  for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function ms(ns){return (ns/1e6).toFixed(3);}
function us(ns){return (ns/1e3).toFixed(1);}
function human(ns){return ns>=1e9?(ns/1e9).toFixed(2)+" s":ns>=1e6?(ns/1e6).toFixed(2)+" ms":
  ns>=1e3?(ns/1e3).toFixed(1)+" µs":ns.toFixed(0)+" ns";}
function num(n){return Number(n).toLocaleString("en-US");}
function color(name){var h=0;for(var i=0;i<name.length;i++)h=(h*31+name.charCodeAt(i))>>>0;
  return "hsl("+(20+h%40)+","+(60+h%30)+"%,"+(55+h%20)+"%)";}
// what the figures are, first
$("mode").textContent=D.mode+" mode, threshold "+D.threshold+": "+D.exact;
$("cost").textContent=D.own_cost+"; clock "+D.clock+(D.ns_per_cycle?" ("+D.ns_per_cycle.toFixed(4)+" ns/cycle)":"");
var facts=[];
if(D.wall_ns!==null&&D.wall_ns!==undefined)facts.push("traced for "+human(D.wall_ns));
if(D.events!==null&&D.events!==undefined)facts.push(num(D.events)+" events");
facts.push(num(D.dropped)+" dropped");facts.push(D.threads.length+" thread(s)");
facts.push(num(D.functions.length)+" functions"+(D.functions_total>D.functions.length?
  " (of "+num(D.functions_total)+" that ran: the ones with the most self time)":""));
if(D.sampling_windows)facts.push(D.sampling_windows+" sampling window(s)");
$("facts").textContent=facts.join(", ");
var lg=$("legend");
lg.appendChild(el("span",{"class":"mark"},"Marks: "));
var notes=Object.keys(D.notation).map(function(k){return k+" = "+D.notation[k];});
lg.appendChild(document.createTextNode((notes.length?notes.join("; ")+".":"none: every figure here is measured.")+
  (D.note?" Partial: "+D.note+".":"")));
function file(i){return D.files[i]||["?","?"];}
function where(f){var p=file(f[1]);return {short:p[0]+(f[2]?":"+f[2]:""),full:p[1]+(f[2]?":"+f[2]:"")};}
function tilde(m){return m||"";}
function marksTitle(m){return D.mark_titles[m]||"";}
function cell(cls,text,m){var c=el("td",{"class":cls},text);var t=marksTitle(m||"");if(t)c.setAttribute("title",t);return c;}
function fnRow(f,withMax){
  var tr=el("tr",{"class":"fn"}),w=where(f);
  tr.appendChild(cell("num self",tilde(f[9])+ms(f[4]),f[9]));
  tr.appendChild(cell("num total",tilde(f[10])+ms(f[5]),f[10]));
  tr.appendChild(cell("num calls",tilde(f[8])+String(f[3]),f[8]));
  tr.appendChild(el("td",{"class":"num mean"},us(f[6])));
  if(withMax)tr.appendChild(el("td",{"class":"num max"},us(f[7])));
  tr.appendChild(el("td",{"class":"l name",title:f[0]},f[0]));
  tr.appendChild(el("td",{"class":"l path",title:w.full},w.short));
  return tr;
}
// the top functions by self time
var bySelf=D.functions.slice().sort(function(a,b){return b[4]-a[4];});
var tb=document.querySelector("#top tbody");
bySelf.slice(0,D.top_rows).forEach(function(f){tb.appendChild(fnRow(f,false));});
if(!D.functions.length)tb.appendChild(el("tr",{},"")).appendChild(el("td",{colspan:"6","class":"l"},"no function recorded"));
// asyncio tasks and loop stalls, when the program ran any
if(D.tasks.length){var tk=$("tasks");
  tk.appendChild(el("h2",{},"asyncio tasks (by running time; a step: from the loop's resume of the task's coroutine to its next await)"));
  var tt=el("table",{id:"tasktable"}),th=el("tr");
  ["tasks","steps","running ms","waiting ms","mean µs","slowest ms","task (its coroutine)","how it ended"].forEach(function(c,i){th.appendChild(el("th",i>5?{"class":"l"}:{},c));});
  tt.appendChild(th);
  D.tasks.forEach(function(t){var tr=el("tr",{"class":"task"});
    tr.appendChild(el("td",{"class":"num"},num(t[0])));tr.appendChild(el("td",{"class":"num"},num(t[1])));
    tr.appendChild(el("td",{"class":"num"},ms(t[2])));
    tr.appendChild(el("td",{"class":"num"},t[7]===null?"-":ms(t[7])));tr.appendChild(el("td",{"class":"num"},us(t[3])));
    tr.appendChild(el("td",{"class":"num"},ms(t[4])));
    tr.appendChild(el("td",{"class":"l name"},t[5].indexOf("Task (")===0?t[5]:t[5]+" ("+t[6]+")"));
    tr.appendChild(el("td",{"class":"l"},t[8]));tt.appendChild(tr);});
  tk.appendChild(tt);
  if(D.stalls.length){
    tk.appendChild(el("h3",{},"Loop stalls: task steps or loop callbacks that held the event loop "+D.stall_ms+" ms or more (the stack each was in at "+D.stall_ms+" ms)"));
    var st=el("table",{id:"stalltable"}),sh=el("tr");
    ["at ms","held ms","task","stack"].forEach(function(c,i){sh.appendChild(el("th",i>1?{"class":"l"}:{},c));});
    st.appendChild(sh);
    D.stalls.forEach(function(s){var tr=el("tr",{"class":"stall"});
      tr.appendChild(el("td",{"class":"num"},ms(s[0])));tr.appendChild(el("td",{"class":"num"},ms(s[1])));
      tr.appendChild(el("td",{"class":"l"},s[2]));tr.appendChild(el("td",{"class":"l"},s[3]));st.appendChild(tr);});
    tk.appendChild(st);}
}
// the hot loops, their disassembly a click away
var lb=$("loops");
if(!D.loops.length)lb.textContent="none recorded";
else{
  var lt=el("table",{id:"looptable"}),h=el("tr");
  ["own ms (callees excluded)","own per iteration","iterations","instructions / iteration","function","where",""].forEach(function(c,i){
    h.appendChild(el("th",i>3?{"class":"l"}:{},c));});
  lt.appendChild(h);
  D.loops.forEach(function(lp){var tr=el("tr",{"class":"loop"}),p=file(lp.file);
    var own=el("td",{"class":"num"},(lp.own_estimated?"~":lp.sample?">":"")+ms(lp.own_ns));
    if(lp.own_estimated)own.setAttribute("title","estimated: its share of its function's self time in its recorded iterations, applied to all of that self time");
    tr.appendChild(own);
    tr.appendChild(el("td",{"class":"num"},human(lp.ns)));
    var it=el("td",{"class":"num"},lp.own_estimated?"~"+num(lp.estimated_iterations):num(lp.iterations)+(lp.sample?" (first)":""));
    if(lp.sample)it.setAttribute("title",lp.own_estimated?"estimated from its first "+num(lp.iterations)+" iterations: its jumps were then de-instrumented":"its first iterations only: its jumps were then de-instrumented");
    tr.appendChild(it);
    tr.appendChild(el("td",{"class":"num"},lp.insns.toFixed(1)));
    tr.appendChild(el("td",{"class":"l name",title:lp["function"]},lp["function"]));
    tr.appendChild(el("td",{"class":"l path",title:p[1]+":"+lp.line},p[0]+":"+lp.line));
    var btn=el("button",{type:"button","class":"dis-btn"},"disassembly ("+lp.rows.length+")");
    var td=el("td",{"class":"l"});td.appendChild(btn);tr.appendChild(td);lt.appendChild(tr);
    var more=el("tr",{"class":"dis-row",hidden:""}),box=el("td",{colspan:"7","class":"l"});
    if(lp.note)box.appendChild(el("p",{},"note: "+lp.note));
    var t=el("table",{"class":"dis"}),hh=el("tr");
    ["offset","line","instruction","argument","cycles","ns"].forEach(function(c){hh.appendChild(el("th",{},c));});
    t.appendChild(hh);
    lp.rows.forEach(function(r){var tr=el("tr");
      tr.appendChild(el("td",{},String(r[0])));tr.appendChild(el("td",{},r[1]===null?"":String(r[1])));
      tr.appendChild(el("td",{"class":"l"},r[2]===r[3]?r[2]:r[2]+" -> "+r[3]));
      tr.appendChild(el("td",{"class":"l"},r[4]));
      tr.appendChild(el("td",{},r[5]===null?"-":r[5].toFixed(1)));
      tr.appendChild(el("td",{},r[6]===null?"-":r[6].toFixed(1)));t.appendChild(tr);});
    box.appendChild(t);more.appendChild(box);lt.appendChild(more);
    btn.onclick=function(){more.hidden=!more.hidden;};
  });
  lb.appendChild(lt);
}
// the icicles
function drawThread(box,th,zoom){
  box.textContent="";
  var kids={};
  th.nodes.forEach(function(n,i){(kids[n[1]]=kids[n[1]]||[]).push(i);});
  var rootTotal=zoom<0?th.total:th.nodes[zoom][3],W=box.clientWidth||1000,rows=1;
  var head=el("div",{"class":"fr",style:"left:0;width:100%;top:0;background:#ddd"},
    th.name+" - "+ms(rootTotal)+" ms"+(zoom<0?"":" (click to zoom out)"));
  head.onclick=function(){drawThread(box,th,-1);};box.appendChild(head);
  var stack=[[zoom,0,0]];
  while(stack.length){
    var it=stack.pop(),id=it[0],x=it[1],d=it[2];
    (kids[id]||[]).forEach(function(k){
      var n=th.nodes[k],w=n[3]/(rootTotal||1);
      if(w*W>=1){
        var name=D.names[n[0]]||"?";
        var f=el("div",{"class":"fr",style:"left:"+(x*100)+"%;width:"+(w*100)+"%;top:"+((d+1)*17)+
          "px;background:"+color(name),title:name+"\ncalls "+n[2]+", total "+ms(n[3])+" ms, self "+ms(n[4])+" ms"},
          name.split(" (")[0]);
        f.onclick=function(){drawThread(box,th,k);};box.appendChild(f);
        rows=Math.max(rows,d+2);stack.push([k,x,d+1]);
      }
      x+=w;
    });
  }
  box.style.height=(rows*17+2)+"px";
}
D.threads.forEach(function(th){var box=el("div",{"class":"ice"});
  $("flames").appendChild(box);drawThread(box,th,-1);});
// every function: search, sort, pages
var hay=D.functions.map(function(f){var p=file(f[1]);return (f[0]+"\u0000"+p[0]+"\u0000"+p[1]).toLowerCase();});
var order=D.functions.map(function(f,i){return i;}),shown=order,sortKey=4,sortDesc=true,page=0;
var tbody=document.querySelector("#functions tbody");
function sortRows(){var F=D.functions;
  order.sort(function(a,b){var x=F[a][sortKey],y=F[b][sortKey];
    if(sortKey===1){x=file(x)[0];y=file(y)[0];}
    var c=typeof x==="string"?x.localeCompare(y):x-y;if(!c)c=F[b][4]-F[a][4];return sortDesc?-c:c;});}
function filterRows(){var q=$("search").value.trim().toLowerCase();
  shown=q?order.filter(function(i){return hay[i].indexOf(q)>=0;}):order;page=0;}
function pagerTo(box){box.textContent="";
  var pages=Math.max(1,Math.ceil(shown.length/D.page_rows)),a=page*D.page_rows;
  var prev=el("button",{type:"button"},"< previous"),next=el("button",{type:"button"},"next >");
  prev.disabled=page<=0;next.disabled=page>=pages-1;
  prev.onclick=function(){page--;drawTable();};next.onclick=function(){page++;drawTable();};
  box.appendChild(prev);
  box.appendChild(el("span",{"class":"muted"},shown.length?"rows "+num(a+1)+"-"+num(Math.min(a+D.page_rows,shown.length))+
    " of "+num(shown.length)+(shown.length<D.functions.length?" (filtered from "+num(D.functions.length)+")":""):
    "no function matches"));
  box.appendChild(next);}
function drawTable(){
  tbody.textContent="";
  var a=page*D.page_rows,frag=document.createDocumentFragment();
  shown.slice(a,a+D.page_rows).forEach(function(i){frag.appendChild(fnRow(D.functions[i],true));});
  tbody.appendChild(frag);pagerTo($("pager"));pagerTo($("pager2"));
  document.querySelectorAll("#functions th").forEach(function(th){
    var on=+th.getAttribute("data-k")===sortKey;th.className="s"+(th.cellIndex>4?" l":"")+(on?" on":"");
    if(on)th.setAttribute("aria-sort",sortDesc?"descending":"ascending");else th.removeAttribute("aria-sort");});
}
document.querySelectorAll("#functions th").forEach(function(th){th.onclick=function(){
  var k=+th.getAttribute("data-k");sortDesc=k===sortKey?!sortDesc:k>2;sortKey=k;sortRows();filterRows();drawTable();};});
var timer=null;
$("search").addEventListener("input",function(){clearTimeout(timer);timer=setTimeout(function(){filterRows();drawTable();},120);});
// #q=TEXT&sort=COLUMN in the address: the table filtered by TEXT and sorted by COLUMN (self, total,
// calls, mean, max, name, file; "-asc" after it: ascending) from the start (a link to a view)
var hq=/[#&]q=([^&]*)/.exec(location.hash),hs=/[#&]sort=([a-z]+)(-asc)?/.exec(location.hash);
if(hq)$("search").value=decodeURIComponent(hq[1]);
var KEYS={self:4,total:5,calls:3,mean:6,max:7,name:0,file:1};
if(hs&&hs[1] in KEYS){sortKey=KEYS[hs[1]];sortDesc=!hs[2];}
sortRows();filterRows();drawTable();
// where the hottest function's row ends, in CSS pixels from the top (its numbers show without scrolling
// when this is less than the window's height)
var first=document.querySelector("#top tbody tr");
if(first)document.body.setAttribute("data-hottest-bottom",String(Math.ceil(first.getBoundingClientRect().bottom+window.scrollY)));
document.body.setAttribute("data-render-ms",String(Math.round(performance.now())));  // since navigation start
document.body.setAttribute("data-ready","1");
}catch(e){fail(e&&e.stack||e);}
</script>
</body></html>
"""
