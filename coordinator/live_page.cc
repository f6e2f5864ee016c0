// The live page served at `/` (HttpServer): plain HTML + JS, no external resources. Each job row
// links to its workers' log lines (/api/jobs/ID/logs, text). It polls
// /api/jobs and /api/jobs/ID/trace every second and draws the executed timeline (one row per
// rank, coordinator clock) above the plan's predicted one, on the same time scale. Each rank has
// its compute row (F, B, W, BW) and below it a send, a receive and a reduce track. /api speaks
// the vocabulary of `zpipe -o json` (docs/json.md): states in lower case ("running"), every field
// present, null for a message that is not set (a job's latest_summary before its first
// iteration), numbers as numbers.
#include "coordinator/http_server.h"

namespace zpipe::coordinator {

const char* LivePageHtml() {
  return R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>ZeroPipe coordinator</title>
<style>
body{font-family:sans-serif;margin:16px;color:#222}
table{border-collapse:collapse;margin-bottom:16px}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}
tr.sel{background:#eef4ff} tr{cursor:pointer}
.bar{display:inline-block;width:120px;height:10px;background:#eee;vertical-align:middle}
.bar>span{display:block;height:10px;background:#4e79a7}
h2{font-size:16px;margin:12px 0 4px} #status{color:#888;font-size:12px}
.legend span{display:inline-block;padding:0 6px;margin-right:4px;color:white;font-size:11px}
</style></head>
<body>
<h1>ZeroPipe</h1>
<div id="status">loading…</div>
<table id="jobs"><thead><tr><th>job</th><th>name</th><th>state</th><th>schedule</th>
<th>progress</th><th>bubble measured / predicted</th><th>logs</th></tr></thead><tbody></tbody></table>
<div class="legend" id="legend"></div>
<h2 id="executed-title">executed timeline</h2>
<div id="executed-timeline" data-iteration="" data-updates="0"></div>
<h2 id="predicted-title">predicted timeline (plan)</h2>
<div id="predicted-timeline"></div>
<script>
"use strict";
const COLORS={F:"#4e79a7",B:"#59a14f",W:"#f28e2b",BW:"#76b7b2",SEND_ACT:"#9c755f",
  SEND_GRAD:"#9c755f",RECV_ACT:"#bab0ac",RECV_GRAD:"#bab0ac",REDUCE:"#e15759",
  R:"#edc948"};
let selected=new URLSearchParams(location.search).get("job");
let pinned=selected!==null;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));}
function pct(x){return x===undefined||x===null?"–":(100*x).toFixed(1)+"%";}
function label(a){
  if(a.kind==="REDUCE")return "REDUCE chunk"+a.chunk+" bucket"+a.bucket;
  if(a.kind.startsWith("SEND"))return a.kind+" s"+a.stage+" mb"+a.microbatch+" -> r"+a.peer;
  if(a.kind.startsWith("RECV"))return a.kind+" s"+a.stage+" mb"+a.microbatch+" <- r"+a.peer;
  return a.kind+" s"+a.stage+" mb"+a.microbatch;
}
// rows: [{name, actions:[{kind,start,end,...}]}]; span: seconds drawn across the width.
// Per rank: the compute row, then the send, recv and reduce tracks (concurrent sends or receives
// overlap, translucent).
function track(kind){return kind.startsWith("SEND")?"send":kind.startsWith("RECV")?"recv":kind==="REDUCE"?"reduce":"compute";}
function drawTimeline(rows,span){
  const W=1100,left=110,rowH=22,sub=5,top=8,axis=22,lane=rowH+3*(sub+1)+6;
  const subY={send:rowH+1,recv:rowH+sub+2,reduce:rowH+2*sub+3};
  const H=top+rows.length*lane+axis, sx=(W-left-10)/Math.max(span,1e-9);
  let s='<svg xmlns="http://www.w3.org/2000/svg" width="'+W+'" height="'+H+'" font-size="10">';
  rows.forEach((row,i)=>{
    const y=top+i*lane;
    s+='<text x="'+(left-6)+'" y="'+(y+rowH/2+4)+'" text-anchor="end">'+esc(row.name)+'</text>';
    s+='<rect x="'+left+'" y="'+y+'" width="'+(W-left-10)+'" height="'+rowH+'" fill="#f2f2f2"/>';
    for(const t of ["send","recv","reduce"])s+='<text x="'+(left-6)+'" y="'+(y+subY[t]+sub)+
      '" text-anchor="end" font-size="6">'+t+"</text>";
    for(const a of row.actions){
      const tr=track(a.kind), compute=tr==="compute";
      const x=left+a.start*sx, w=Math.max(0.5,(a.end-a.start)*sx);
      const yy=compute?y:y+subY[tr], hh=compute?rowH:sub;
      s+='<rect class="action" data-kind="'+a.kind+'" data-track="'+tr+'" x="'+x.toFixed(2)+'" y="'+yy+
         '" width="'+w.toFixed(2)+'" height="'+hh+'" fill="'+(COLORS[a.kind]||"#999")+'"'+
         (tr==="send"||tr==="recv"?' fill-opacity="0.6"':"")+
         ' stroke="white" stroke-width="0.5"><title>'+esc(label(a))+" ["+(1e3*a.start).toFixed(2)+
         ", "+(1e3*a.end).toFixed(2)+"] ms</title></rect>";
      if(compute&&w>=14)s+='<text x="'+(x+w/2).toFixed(2)+'" y="'+(y+rowH/2+3)+
         '" text-anchor="middle" fill="white" font-size="9">'+a.microbatch+"</text>";
    }
  });
  const ay=top+rows.length*lane+4;
  s+='<line x1="'+left+'" y1="'+ay+'" x2="'+(W-10)+'" y2="'+ay+'" stroke="black"/>';
  for(let k=0;k<=10;k++){const x=left+k*(W-left-10)/10;
    s+='<text x="'+x.toFixed(1)+'" y="'+(ay+14)+'" text-anchor="middle">'+(1e3*span*k/10).toFixed(1)+" ms</text>";}
  return s+"</svg>";
}
function extent(rows){let e=0;for(const r of rows)for(const a of r.actions)e=Math.max(e,a.end);return e;}
const token=new URLSearchParams(location.search).get("token");
async function getJson(url){const r=await fetch(url,{cache:"no-store",headers:token?{Authorization:"Bearer "+token}:{}});const j=await r.json();if(!r.ok)throw new Error(j.message||r.status);return j;}
function logsUrl(id){return "/api/jobs/"+encodeURIComponent(id)+"/logs"+(token?"?token="+encodeURIComponent(token):"");}
function renderJobs(jobs){
  const body=document.querySelector("#jobs tbody");
  body.innerHTML=jobs.map(j=>{
    const p=j.progress||{},done=p.iterations_done||0,total=p.iterations_total||(j.spec&&j.spec.train&&j.spec.train.iterations)||0;
    const st=j.state||"";
    const ls=j.latest_summary||{};
    return '<tr data-job="'+esc(j.id)+'" class="'+(j.id===selected?"sel":"")+'"><td>'+esc(j.id)+"</td><td>"+
      esc(j.spec&&j.spec.name||"")+'</td><td class="state">'+st+"</td><td>"+esc(j.spec&&j.spec.schedule&&j.spec.schedule.kind||"")+
      '</td><td><span class="bar"><span style="width:'+(total?100*done/total:0)+'%"></span></span> '+done+"/"+total+
      "</td><td>"+(ls.iteration!==undefined&&done>0?pct(ls.bubble_rate)+" / "+pct(ls.predicted_bubble_rate):"–")+
      '</td><td><a class="logs" target="_blank" href="'+esc(logsUrl(j.id))+'">logs</a></td></tr>';
  }).join("");
  for(const tr of body.querySelectorAll("tr"))tr.onclick=()=>{selected=tr.dataset.job;pinned=true;tick(true);};
}
let timer=null;
async function tick(once){
  if(timer!==null){clearTimeout(timer);timer=null;}
  try{
    const jobs=(await getJson("/api/jobs")).jobs||[];
    if(!pinned||!jobs.some(j=>j.id===selected)){
      const running=jobs.filter(j=>j.state==="running");
      const pick=running.length?running[running.length-1]:jobs[jobs.length-1];
      selected=pick?pick.id:null;
    }
    renderJobs(jobs);
    const ex=document.getElementById("executed-timeline"),pr=document.getElementById("predicted-timeline");
    if(selected){
      try{
        const t=await getJson("/api/jobs/"+encodeURIComponent(selected)+"/trace");
        const rows=(t.ranks||[]).map(r=>({name:"rank "+r.pipeline_rank+(r.data_rank?" dp"+r.data_rank:""),actions:r.actions||[]}));
        const prow=(t.predicted||[]).map(r=>({name:"rank "+r.pipeline_rank,actions:r.actions||[]}));
        const span=Math.max(extent(rows),extent(prow));
        if(ex.dataset.iteration!==String(t.iteration)||ex.dataset.job!==selected)ex.dataset.updates=String(1+Number(ex.dataset.updates||0));
        ex.innerHTML=drawTimeline(rows,span);ex.dataset.iteration=String(t.iteration);ex.dataset.job=selected;
        pr.innerHTML=drawTimeline(prow,span);
        const offs=(t.ranks||[]).map(r=>(1e3*(r.clock_offset||0)).toFixed(2)).join(", ");
        document.getElementById("executed-title").textContent="executed timeline — job "+selected+
          ", iteration "+t.iteration+" ("+(1e3*extent(rows)).toFixed(1)+" ms; clock offsets ms: "+offs+")";
        document.getElementById("predicted-title").textContent="predicted timeline (plan "+(t.schedule||"")+
          ", "+(1e3*extent(prow)).toFixed(1)+" ms)";
      }catch(e){document.getElementById("executed-title").textContent="executed timeline — job "+selected+": "+e.message;}
    }
    document.getElementById("status").textContent="updated "+new Date().toLocaleTimeString();
  }catch(e){document.getElementById("status").textContent="coordinator unreachable: "+e.message;}
  if(!once||timer===null)timer=setTimeout(()=>tick(false),1000);
}
document.getElementById("legend").innerHTML=Object.entries({F:"F",B:"B",W:"W",BW:"BW",R:"R",SEND:"SEND_ACT",RECV:"RECV_ACT",REDUCE:"REDUCE"})
  .map(([n,k])=>'<span style="background:'+COLORS[k]+'">'+n+"</span>").join("");
tick(false);
</script>
</body></html>
)HTML";
}

}  // namespace zpipe::coordinator
