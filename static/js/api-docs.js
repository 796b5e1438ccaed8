// Swagger UI draws after the page loads, with its title as h1 and sections as h3: name the
// parts outside its <main> as regions and move each heading up a level so none is skipped.
(function () {
  const root = document.getElementById("swagger-ui");
  const label = function (selector, name) {
    const element = root.querySelector(selector);
    if (element && !element.hasAttribute("role")) {
      element.setAttribute("role", "region");
      element.setAttribute("aria-label", name);
    }
  };
  const adjust = function () {
    label(".information-container", "About the API");
    label(".scheme-container", "Servers and authorization");
    root.querySelectorAll("h3:not([aria-level]), h4:not([aria-level]), h5:not([aria-level])").forEach(function (heading) {
      heading.setAttribute("aria-level", String(Number(heading.tagName[1]) - 1));
    });
  };
  new MutationObserver(adjust).observe(root, {childList: true, subtree: true});
})();
