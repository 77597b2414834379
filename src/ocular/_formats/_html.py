"""HTML output (.html): one self-contained page, nothing loaded from the network.

Three parts, drawn by a small script from data embedded in the page:

* an icicle (a flame graph, callers above callees) of each thread's call tree: width is total time,
  a click zooms into a frame, the top bar zooms back out; hovering shows calls, total and self;
* the function table of the statistics (the same figures as the console report: calls, self, total,
  mean, max; Ocular's own cost per event subtracted), sortable by any column (click its header);
* the hot loops with their disassembly (instruction, argument, cycles and ns per execution).

The icicle's times are the call tree's (wall-clock between enter and leave, as the timeline shows
them).  If the script fails, the page says so in a red line (and in the ``data-error`` attribute of
<body>), so a broken page cannot pass for an empty one.
"""

import html
import json

from .. import _ocular

MIN_FRACTION = 0.0005  # icicle: frames narrower than this share of their thread are left out


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
    from .._report import KEEP_FUNCTIONS, Report

    mode = "precise" if rendered.get("precise") else "adaptive"
    return Report(_ocular._report_data(with_code, KEEP_FUNCTIONS), mode, None, rendered.get("clock", ""))


def _marks(f, field):
    """The marks of one figure of a report row: "~" estimated, "*" from a part of the calls only."""
    return ("~" if field in f.get("estimated_fields", ()) else "") + ("*" if f["sample"] else "")


def build(tree, rendered, title="Ocular profile", with_code=False):
    """The page.  with_code: the session's code objects are alive (at stop): the loops' disassembly
    shows specialized instructions and arguments, not only the recorded bytecode's base names."""
    threads, names = _tree_json(tree)
    rep = _report(rendered, with_code)
    # marks as in the text report: ~ estimated (sampling windows), * a part of the calls (de-instrumented)
    funcs = [[f["name"], f["file"], f["line"], f["calls"], f["self_ns"], f["total_ns"], f["mean_ns"], f["max_ns"],
              _marks(f, "calls"), _marks(f, "self"), _marks(f, "total")] for f in rep.functions]
    loops = [{"function": lp["function"], "file": lp["file"], "line": lp["line"], "iterations": lp["iterations"],
              "ns": lp["ns_per_iteration"], "insns": lp["instructions_per_iteration"], "note": lp["note"],
              "rows": [[r["offset"], r["line"], r["base"], r["specialized"], r["arg"], r["cycles"], r["ns"]]
                       for r in lp["rows"] or []]} for lp in rep.hot_loops()]
    data = {"threads": threads, "names": {str(k): v for k, v in names.items()}, "functions": funcs, "loops": loops,
            "mode": rep.mode + (", near-zero" if rep.near_zero else ""), "clock": rep.clock,
            "overhead": rep.overhead_cycles, "threshold": rep.threshold,
            "exact": "every function call counted and timed" if not rep.near_zero else
                     "function starts de-instrumented after the threshold: figures past it are samples or estimates",
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
<title>@TITLE@</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px}h2{font-size:15px;margin-top:24px}
.ice{position:relative;border:1px solid #ccc;overflow:hidden;margin-bottom:6px}
.fr{position:absolute;height:17px;box-sizing:border-box;border:1px solid #fff;font-size:11px;white-space:nowrap;
overflow:hidden;text-overflow:ellipsis;cursor:pointer;padding:0 2px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
td.l,th.l{text-align:left}th{cursor:pointer;background:#f4f4f4;user-select:none}
.err{color:#fff;background:#c00;padding:4px}.muted{color:#777}
pre{margin:0}
</style></head>
<body data-error="">
<h1>@TITLE@</h1>
<div id="error"></div>
<p class="muted" id="summary"></p>
<h2>Call tree (icicle: callers above callees; width = total time; click to zoom)</h2>
<div id="flames"></div>
<h2>Functions <span class="muted">(click a header to sort; Ocular's own cost per event subtracted)</span></h2>
<table id="functions"><thead><tr>
<th class="l" data-k="0">function</th><th class="l" data-k="1">file:line</th><th data-k="3">calls</th>
<th data-k="4">self ms</th><th data-k="5">total ms</th><th data-k="6">mean µs</th><th data-k="7">max µs</th>
</tr></thead><tbody></tbody></table>
<h2>Hot loops</h2>
<div id="loops"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
"use strict";
function fail(msg){document.body.setAttribute("data-error",String(msg));
  var e=document.getElementById("error");e.className="err";e.textContent="page error: "+msg;}
window.addEventListener("error",function(ev){fail(ev.message);});
try{
var D=JSON.parse(document.getElementById("data").textContent);
function el(tag,attrs,text){var e=document.createElement(tag);
  for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function ms(ns){return (ns/1e6).toFixed(3);}
function us(ns){return (ns/1e3).toFixed(1);}
function color(name){var h=0;for(var i=0;i<name.length;i++)h=(h*31+name.charCodeAt(i))>>>0;
  return "hsl("+(20+h%40)+","+(60+h%30)+"%,"+(55+h%20)+"%)";}
document.getElementById("summary").textContent="mode "+D.mode+", threshold "+D.threshold+" ("+D.exact+
  "), clock "+D.clock+", "+D.threads.length+" thread(s), "+D.functions.length+" function(s). Marks: ~ estimated "+
  "from sampling windows, * from a part of the calls (de-instrumented after the threshold)"+
  (D.note?". Partial: "+D.note:"");
function drawThread(box,th,zoom){
  box.textContent="";
  var kids={},depth={},x0={};
  th.nodes.forEach(function(n,i){(kids[n[1]]=kids[n[1]]||[]).push(i);});
  var rootTotal=zoom<0?th.total:th.nodes[zoom][3],W=box.clientWidth||1000,rows=1;
  var head=el("div",{"class":"fr",style:"left:0;width:100%;top:0;background:#ddd"},
    th.name+" - "+ms(rootTotal)+" ms"+(zoom<0?"":" (click to zoom out)"));
  head.onclick=function(){drawThread(box,th,-1);};box.appendChild(head);
  var stack=[[zoom,0,0]];
  while(stack.length){
    var it=stack.pop(),id=it[0],x=it[1],d=it[2];
    (kids[id]||[]).forEach(function(k){
      var n=th.nodes[k],w=n[3]/rootTotal;
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
  document.getElementById("flames").appendChild(box);drawThread(box,th,-1);});
var tbody=document.querySelector("#functions tbody"),sortKey=4,sortDesc=true;
function drawTable(){
  var rows=D.functions.slice().sort(function(a,b){var x=a[sortKey],y=b[sortKey];
    var c=typeof x==="string"?x.localeCompare(y):x-y;return sortDesc?-c:c;});
  tbody.textContent="";
  rows.forEach(function(f){var tr=el("tr",{"class":"fn"});
    tr.appendChild(el("td",{"class":"l name"},f[0]));tr.appendChild(el("td",{"class":"l"},f[1]+":"+f[2]));
    tr.appendChild(el("td",{"class":"calls"},f[8]+String(f[3])));
    tr.appendChild(el("td",{"class":"self"},f[9]+ms(f[4])));
    tr.appendChild(el("td",{"class":"total"},f[10]+ms(f[5])));tr.appendChild(el("td",{},us(f[6])));
    tr.appendChild(el("td",{},us(f[7])));tbody.appendChild(tr);});
}
document.querySelectorAll("#functions th").forEach(function(th){th.onclick=function(){
  var k=+th.getAttribute("data-k");sortDesc=k===sortKey?!sortDesc:k>2;sortKey=k;drawTable();};});
drawTable();
var lb=document.getElementById("loops");
if(!D.loops.length)lb.textContent="none recorded";
D.loops.forEach(function(lp){
  lb.appendChild(el("h3",{},lp.function+" at "+lp.file+":"+lp.line+" - "+lp.iterations+" iterations, "+
    lp.ns.toFixed(1)+" ns and "+lp.insns.toFixed(1)+" instructions per iteration"));
  if(lp.note)lb.appendChild(el("p",{},"note: "+lp.note));
  var t=el("table",{"class":"loop"}),h=el("tr");
  ["offset","line","instruction","argument","cycles","ns"].forEach(function(c){h.appendChild(el("th",{},c));});
  t.appendChild(h);
  lp.rows.forEach(function(r){var tr=el("tr");
    tr.appendChild(el("td",{},String(r[0])));tr.appendChild(el("td",{},r[1]===null?"":String(r[1])));
    tr.appendChild(el("td",{"class":"l"},r[2]===r[3]?r[2]:r[2]+" -> "+r[3]));
    tr.appendChild(el("td",{"class":"l"},r[4]));
    tr.appendChild(el("td",{},r[5]===null?"-":r[5].toFixed(1)));
    tr.appendChild(el("td",{},r[6]===null?"-":r[6].toFixed(1)));t.appendChild(tr);});
  lb.appendChild(t);
});
document.body.setAttribute("data-ready","1");
}catch(e){fail(e&&e.stack||e);}
</script>
</body></html>
"""
