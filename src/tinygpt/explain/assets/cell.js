// A view of the page in a notebook cell (tinygpt.explain.inline): the whole page, one section of it shown,
// in a frame of its own. This script runs after the page's, inside the frame: it opens the backward pass
// where the view is of it, and tells the notebook the height the view needs, whenever that changes and
// whenever the notebook asks (its listener may start after this frame has drawn itself, and a frame out
// of sight is not drawn at all).
{
  if (document.body.dataset.backward === "open") document.getElementById("backward-toggle").click();
  const report = () => {
    const bottom = document.querySelector("main").getBoundingClientRect().bottom + window.scrollY;
    const height = Math.ceil(bottom) + 24;
    parent.postMessage({ tinygptHeight: height }, "*");
  };
  new ResizeObserver(report).observe(document.body);
  window.addEventListener("message", (e) => {
    if (e.data === "tinygpt-height?") report();
  });
}
