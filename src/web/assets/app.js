// toolq dashboard: refresh the page's live parts once a second without a reload.
// The page is fetched again and every element marked data-live is swapped for its new
// version (by id). A part holding the focused field is left alone so typing is not lost.
// Polling only reads; it stops while the tab is hidden.
(function () {
  "use strict";
  var PERIOD = 1000;
  var badge = document.getElementById("live");
  var busy = false;

  function follow() {
    var log = document.getElementById("log");
    var box = document.getElementById("follow");
    if (log && box && box.checked) log.scrollTop = log.scrollHeight;
  }

  function swap(doc) {
    var parts = document.querySelectorAll("[data-live]");
    for (var i = 0; i < parts.length; i++) {
      var old = parts[i];
      if (!old.id) continue;
      var fresh = doc.getElementById(old.id);
      if (!fresh) continue;
      if (old.contains(document.activeElement) && document.activeElement !== document.body) continue;
      if (old.innerHTML !== fresh.innerHTML) {
        var keep = old.scrollTop;
        old.innerHTML = fresh.innerHTML;
        old.scrollTop = keep;
      }
    }
    follow();
  }

  function tick() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(location.href, { headers: { "Accept": "text/html", "X-Toolq-Live": "1" }, credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status);
        return r.text();
      })
      .then(function (text) {
        swap(new DOMParser().parseFromString(text, "text/html"));
        // How many refreshes this page has had (tests wait on it instead of sleeping).
        var root = document.documentElement;
        root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
        if (badge) { badge.textContent = "live"; badge.className = "live"; }
      })
      .catch(function () {
        if (badge) { badge.textContent = "offline"; badge.className = "live off"; }
      })
      .then(function () { busy = false; });
  }

  follow();
  setInterval(tick, PERIOD);
})();
