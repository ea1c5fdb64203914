// Pending approvals appear (and leave) without a reload. Each second the script asks whether the
// set of pending approvals moved (its version); only then does it get their ids, and it fetches
// the server-rendered (escaped) item of each new one once. Items already shown are left alone,
// so a reason being typed is never lost, and an idle queue costs a few bytes a poll.
"use strict";
(function () {
  const list = document.getElementById("pending");
  if (!list) return;
  const none = document.getElementById("none-pending");
  const status = document.getElementById("live-status");
  const POLL_MS = 1000;
  const JSON_ONLY = { credentials: "same-origin", headers: { Accept: "application/json" } };
  let version = list.dataset.version || "";
  let busy = false;

  async function added(id) {
    const response = await fetch(
      "/console/approvals/" + encodeURIComponent(id) + "/item",
      { credentials: "same-origin" },
    );
    if (!response.ok) return; // decided meanwhile: the next version drops it
    const html = await response.text();
    if (!document.getElementById(id)) list.insertAdjacentHTML("beforeend", html);
  }

  async function refresh() {
    let data;
    try {
      const response = await fetch(
        "/console/approvals/pending?version=" + encodeURIComponent(version),
        JSON_ONLY,
      );
      if (response.redirected || !response.ok) {
        window.location.assign("/console/sign-in");
        return;
      }
      data = await response.json();
      if (data.ids) {
        const current = new Set(data.ids);
        for (const item of Array.from(list.children)) {
          if (!current.has(item.id)) item.remove();
        }
        for (const id of data.ids) {
          if (!document.getElementById(id)) await added(id);
        }
        none.hidden = data.ids.length > 0;
      }
      version = data.version;
    } catch (error) {
      status.textContent = "Cannot reach the sidecar; retrying.";
      return;
    }
    status.textContent = "Live: checked at " + new Date().toLocaleTimeString() + ".";
  }

  window.setInterval(async function () {
    if (busy) return; // a slow answer is not asked again on top of itself
    busy = true;
    try {
      await refresh();
    } finally {
      busy = false;
    }
  }, POLL_MS);
})();
