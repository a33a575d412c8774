/** The admin page's stylesheet, inline and small: the page needs no build step, no asset route and no JavaScript. */
export const CSS = `
:root { --fg:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f7f8fa; --card:#fff; --accent:#2457c5;
  --ok:#1f7a4d; --okbg:#e3f6ec; --bad:#b42318; --badbg:#fde8e7; --warn:#8a5a00; --warnbg:#fff4d6;
  --info:#1d4ed8; --infobg:#e6eefc; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header.top { background:#111827; color:#fff; padding:8px 24px; display:flex; flex-wrap:wrap; align-items:center; gap:8px 24px; min-height:48px; }
header.top .brand { font-weight:600; letter-spacing:.02em; }
/* Links wrap onto a second row on a narrow screen: the JSX puts no space between them to break at. */
header.top nav { display:flex; flex-wrap:wrap; row-gap:4px; }
header.top nav a { color:#cbd2d9; text-decoration:none; margin-right:16px; }
header.top nav a.on, header.top nav a:hover { color:#fff; }
header.top .who { margin-left:auto; display:flex; align-items:center; gap:12px; color:#cbd2d9; }
header.top form { margin:0; display:flex; }
main { padding:24px; max-width:1280px; margin:0 auto; }
h1 { font-size:20px; margin:0 0 16px; }
h2 { font-size:16px; margin:28px 0 10px; }
a { color:var(--accent); }
table { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); }
th, td { text-align:left; padding:7px 10px; border-bottom:1px solid var(--line); vertical-align:top; }
th { background:#f0f2f5; font-weight:600; font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.03em; }
tr:last-child td { border-bottom:0; }
table.facts th { width:200px; text-transform:none; font-size:13px; }
td.mono, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:13px; }
h1 .mono, h1.mono { font-size:inherit; }
td.err { color:var(--bad); max-width:360px; overflow-wrap:anywhere; }
pre { background:#0f172a; color:#e2e8f0; padding:12px 14px; border-radius:6px; overflow:auto; max-height:420px;
  font:12.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; margin:0; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; white-space:nowrap; }
.b-ok { color:var(--ok); background:var(--okbg); } .b-bad { color:var(--bad); background:var(--badbg); }
.b-warn { color:var(--warn); background:var(--warnbg); } .b-info { color:var(--info); background:var(--infobg); }
.b-muted { color:var(--muted); background:#eef0f3; }
form.filters { display:flex; flex-wrap:wrap; gap:10px; align-items:flex-end; background:var(--card);
  border:1px solid var(--line); padding:12px; margin-bottom:16px; border-radius:6px; }
label { display:flex; flex-direction:column; gap:3px; font-size:12px; color:var(--muted); }
input, select, textarea { font:inherit; padding:5px 8px; border:1px solid #cbd2d9; border-radius:4px; background:#fff; color:var(--fg); }
textarea { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; min-height:70px; width:100%; }
button { font:inherit; padding:6px 14px; border-radius:4px; border:1px solid var(--accent); background:var(--accent); color:#fff; cursor:pointer; }
button.secondary { background:#fff; color:var(--accent); }
button.danger { background:var(--bad); border-color:var(--bad); }
button.ok { background:var(--ok); border-color:var(--ok); }
button.link { background:none; border:0; color:#cbd2d9; padding:0; font-size:14px; }
form.filters > a { align-self:center; }
.notice { padding:10px 14px; border-radius:6px; margin-bottom:16px; border:1px solid; }
.notice.ok { color:var(--ok); background:var(--okbg); border-color:#b7e4cb; }
.notice.bad { color:var(--bad); background:var(--badbg); border-color:#f5c2be; }
.row { display:flex; gap:12px; align-items:center; flex-wrap:wrap; }
.muted { color:var(--muted); }
.pager { display:flex; gap:16px; margin:12px 0; }
.card { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:16px; margin-bottom:20px; }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:16px; }
/* A grid column may shrink below its content's width: a wide table or body scrolls inside it. */
.grid2 > * { min-width:0; }
.decisions { display:grid; grid-template-columns:repeat(3,1fr); gap:12px; margin-top:14px; align-items:start; }
.decisions form { border:1px solid var(--line); border-radius:6px; padding:12px; display:flex; flex-direction:column; gap:8px; }
.decisions form.proposed { border-color:var(--accent); box-shadow:0 0 0 1px var(--accent) inset; }
.login { max-width:360px; margin:80px auto; }
.login form { display:flex; flex-direction:column; gap:12px; }
.earlier { color:var(--muted); overflow-wrap:anywhere; }
.stats { display:grid; grid-template-columns:repeat(auto-fit,minmax(150px,1fr)); gap:12px; margin-bottom:16px; }
.stat { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:10px 14px; }
.stat b { display:block; font-size:22px; }
.stat.bad b { color:var(--bad); } .stat.warn b { color:var(--warn); }
svg.chart { width:100%; height:auto; display:block; background:var(--card); }
svg.chart text { font:11px system-ui,sans-serif; fill:var(--muted); }
.legend { display:flex; gap:14px; font-size:12px; color:var(--muted); margin:6px 0; flex-wrap:wrap; }
.legend i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; vertical-align:-1px; }
.tabs { display:flex; gap:6px; flex-wrap:wrap; margin-bottom:12px; align-items:center; }
.tabs a { padding:3px 10px; border:1px solid var(--line); border-radius:14px; text-decoration:none; background:var(--card); }
.tabs a.on { background:var(--accent); color:#fff; border-color:var(--accent); }
pre.wrap { white-space:pre-wrap; overflow-wrap:anywhere; }
.hash { overflow-wrap:anywhere; }
pre.excerpt { max-height:120px; white-space:pre-wrap; overflow-wrap:anywhere; font-size:12px; padding:6px 8px; }
/* Narrow screens: one column, and a wide table scrolls inside itself instead of widening the page. */
@media (max-width: 760px) {
  main { padding:12px; }
  header.top { padding:8px 12px; }
  header.top nav a { margin-right:10px; }
  .grid2, .decisions { grid-template-columns:1fr; }
  table { display:block; overflow-x:auto; }
  table.facts th { width:auto; }
  table.facts td { overflow-wrap:anywhere; }
  td.mono { white-space:nowrap; }
  table.facts td.mono, table.headers td.mono { white-space:normal; }
  /* The chart scales down to the screen; its labels are drawn larger so they stay readable. */
  svg.chart text { font-size:26px; }
  td.err { max-width:none; min-width:200px; }
}
`
