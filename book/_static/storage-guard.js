/* Runs first on every page (see _templates/layout.html).
 *
 * Where the browser refuses web storage (site data disabled, a sandboxed iframe), merely
 * reading window.localStorage throws. The theme's and Sphinx's own scripts read it without a
 * guard, so this puts an in-memory stand-in in its place for the life of the page, and records
 * in window.bookStorage.persistent whether anything can really be saved: progress.js offers
 * "mark as done" only when it can.
 */
(function () {
  "use strict";
  function usable(name) {
    try {
      var store = window[name];
      var probe = "__book_storage_probe__";
      store.setItem(probe, probe);
      store.removeItem(probe);
      return true;
    } catch (e) {
      return false;
    }
  }
  function memoryStorage() {
    var items = new Map();
    return {
      get length() { return items.size; },
      key: function (i) { return Array.from(items.keys())[i] ?? null; },
      getItem: function (k) { return items.has(String(k)) ? items.get(String(k)) : null; },
      setItem: function (k, v) { items.set(String(k), String(v)); },
      removeItem: function (k) { items.delete(String(k)); },
      clear: function () { items.clear(); },
    };
  }
  var persistent = usable("localStorage");
  ["localStorage", "sessionStorage"].forEach(function (name) {
    if (usable(name)) return;
    try {
      Object.defineProperty(window, name, { value: memoryStorage(), configurable: true });
    } catch (e) {
      /* cannot replace it here: progress still stays off, and nothing else is ours to fix */
    }
  });
  window.bookStorage = { persistent: persistent };
})();
