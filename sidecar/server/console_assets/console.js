// Pending approvals appear (and leave) without a reload: poll this console's own JSON list and
// add each new approval's server-rendered (escaped) item; items already shown are left alone
// so a reason being typed is never lost.
"use strict";
(function () {
  const list = document.getElementById("pending");
  if (!list) return;
  const none = document.getElementById("none-pending");
  const status = document.getElementById("live-status");
  const POLL_MS = 1000;

  async function refresh() {
    let data;
    try {
      const response = await fetch("/console/approvals/pending", {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.redirected || !response.ok) {
        window.location.assign("/console/sign-in");
        return;
      }
      data = await response.json();
    } catch (error) {
      status.textContent = "Cannot reach the sidecar; retrying.";
      return;
    }
    const current = new Set();
    for (const approval of data.approvals) {
      current.add(approval.id);
      if (!document.getElementById(approval.id)) {
        list.insertAdjacentHTML("beforeend", approval.html);
      }
    }
    for (const item of Array.from(list.children)) {
      if (!current.has(item.id)) item.remove();
    }
    none.hidden = data.approvals.length > 0;
    status.textContent = "Live: checked at " + new Date().toLocaleTimeString() + ".";
  }

  window.setInterval(refresh, POLL_MS);
})();
