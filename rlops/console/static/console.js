// Decision map: clicking (or Enter on) a node shows its detail panel.
(function () {
  var map = document.getElementById("decision-map");
  if (!map) return;
  function show(node) {
    var id = node.getAttribute("data-cluster");
    document.querySelectorAll(".node-detail").forEach(function (d) { d.hidden = d.id !== "cluster-" + id; });
    document.querySelectorAll("#decision-map .node").forEach(function (n) { n.classList.toggle("selected", n === node); });
    var hint = document.getElementById("node-hint");
    if (hint) hint.hidden = true;
    history.replaceState(null, "", "#cluster-" + id);
  }
  map.querySelectorAll(".node").forEach(function (node) {
    node.addEventListener("click", function () { show(node); });
    node.addEventListener("keydown", function (e) { if (e.key === "Enter") show(node); });
  });
  var m = /^#cluster-(\d+)$/.exec(location.hash);
  if (m) { var n = map.querySelector('.node[data-cluster="' + m[1] + '"]'); if (n) show(n); }
})();
