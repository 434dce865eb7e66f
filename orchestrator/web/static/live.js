// threadloom web viewer: the little the pages need beyond HTML. Reading needs none of it.
// - a running thread's page appends new messages from /t/T-…/events (server-sent events);
// - a #seq past the loaded page goes to the page holding it;
// - the search page searches as you type.
// Every fragment inserted here was rendered and escaped by the server's templates.
(function () {
  "use strict";
  var messages = document.getElementById("messages");

  if (messages) {
    var m = /^#(\d+)$/.exec(location.hash);
    if (m && !document.getElementById(m[1])) {
      var seq = parseInt(m[1], 10), page = parseInt(messages.dataset.page, 10);
      if (seq >= 1 && seq <= parseInt(messages.dataset.head, 10)) {
        var from = Math.floor((seq - 1) / page) * page + 1;
        location.replace(location.pathname + "?from=" + from + "#" + seq);
      }
    }
  }

  if (messages && messages.dataset.events && window.EventSource) {
    var source = new EventSource(messages.dataset.events);
    source.addEventListener("message", function (e) {
      var d = JSON.parse(e.data);
      if (document.getElementById(String(d.seq))) return;
      messages.insertAdjacentHTML("beforeend", d.html);
      messages.dataset.last = d.seq;
    });
    source.addEventListener("status", function (e) {
      var d = JSON.parse(e.data);
      var badge = document.querySelector(".thread-head [data-status]");
      if (badge) {
        badge.textContent = d.status;
        badge.className = "status status-" + d.status;
      }
    });
    source.addEventListener("end", function () {
      source.close();
      var live = document.getElementById("live");
      if (live) live.textContent = "the thread has ended";
    });
  }

  var box = document.querySelector("[data-live-search]");
  var hits = document.getElementById("hits");
  if (box && hits && window.fetch) {
    var timer = null, asked = 0;
    box.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var params = new URLSearchParams(new FormData(box.form));
        var n = ++asked;
        history.replaceState(null, "", "/search?" + params.toString());
        params.set("fragment", "1");
        fetch("/search?" + params.toString()).then(function (r) {
          return r.ok ? r.text() : "";
        }).then(function (html) {
          if (n === asked) hits.innerHTML = html;
        });
      }, 200);
    });
  }
})();
