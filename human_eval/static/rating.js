// Disable a form's submit button once it is sent, so a double click sends one request.
// (The server stores one rating per page anyway; this only spares a second round trip.)
document.addEventListener("submit", function (event) {
  var button = event.target.querySelector("button[type=submit]");
  if (button) {
    setTimeout(function () { button.disabled = true; }, 0);
  }
});

// A slider shows its value beside it (the value is also read out by screen readers).
document.addEventListener("input", function (event) {
  var slider = event.target;
  if (slider.type === "range") {
    var out = document.getElementById(slider.id + "-out");
    if (out) { out.textContent = slider.value; }
  }
});
