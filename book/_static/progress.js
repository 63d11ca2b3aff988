/* "Mark as done" for every lesson, kept in this browser's localStorage only.
 *
 * A lesson page holds <div class="lesson-progress" data-lesson="NN_slug"> (a button and a
 * note); the home page holds <span class="lesson-status" data-lesson="NN_slug"> per lesson and
 * a <p class="progress-summary">. Both are written by book/lessons.py. Where storage is
 * unavailable (storage-guard.js says so, or access throws) the button stays hidden and the
 * note says that progress is not saved; every lesson stays open either way.
 */
(function () {
  "use strict";
  var PREFIX = "shard-course:done:";

  function storage() {
    if (window.bookStorage && !window.bookStorage.persistent) return null;
    try {
      var store = window.localStorage;
      var probe = PREFIX + "__probe__";
      store.setItem(probe, "1");
      store.removeItem(probe);
      return store;
    } catch (e) {
      return null;
    }
  }

  function isDone(store, lesson) {
    try {
      return store.getItem(PREFIX + lesson) === "1";
    } catch (e) {
      return false;
    }
  }

  function setDone(store, lesson, done) {
    try {
      if (done) store.setItem(PREFIX + lesson, "1");
      else store.removeItem(PREFIX + lesson);
      return true;
    } catch (e) {
      return false; /* full or revoked meanwhile: the page shows the state that was kept */
    }
  }

  function showControl(store, box) {
    var lesson = box.dataset.lesson;
    var button = box.querySelector(".lesson-done-toggle");
    var note = box.querySelector(".lesson-progress-note");
    if (!store) {
      button.hidden = true;
      note.textContent = "Progress is unavailable in this browser (storage is off); every lesson stays open.";
      box.classList.add("progress-unavailable");
      return;
    }
    var done = isDone(store, lesson);
    button.hidden = false;
    button.setAttribute("aria-pressed", String(done));
    button.textContent = done ? "Done \u2713 (mark as not done)" : "Mark as done";
    note.textContent = done ? "Saved in this browser." : "";
    box.classList.toggle("is-done", done);
  }

  function showList(store) {
    var slots = document.querySelectorAll(".lesson-status[data-lesson]");
    var summary = document.querySelector(".progress-summary");
    var count = 0;
    slots.forEach(function (slot) {
      var done = store ? isDone(store, slot.dataset.lesson) : false;
      if (done) count += 1;
      slot.hidden = !done;
      slot.textContent = done ? "\u2713 done" : "";
      var item = slot.closest("li");
      if (item) item.classList.toggle("is-done", done);
    });
    if (summary && slots.length) {
      summary.hidden = false;
      summary.textContent = store
        ? count + " of " + slots.length + " lessons marked done in this browser."
        : "Progress is unavailable in this browser (storage is off); every lesson is open.";
    }
  }

  function render(store) {
    document.querySelectorAll(".lesson-progress[data-lesson]").forEach(function (box) {
      showControl(store, box);
    });
    showList(store);
  }

  function start() {
    var store = storage();
    render(store);
    if (!store) return;
    document.querySelectorAll(".lesson-progress[data-lesson]").forEach(function (box) {
      box.querySelector(".lesson-done-toggle").addEventListener("click", function () {
        setDone(store, box.dataset.lesson, !isDone(store, box.dataset.lesson));
        render(store);
      });
    });
    /* another tab marked a lesson */
    window.addEventListener("storage", function (event) {
      if (event.key === null || event.key.indexOf(PREFIX) === 0) render(store);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
