// Disable a form's submit button once it is sent, so a double click sends one request.
// (The server stores one rating per page anyway; this only spares a second round trip.)
document.addEventListener("submit", function (event) {
  var button = event.target.querySelector("button[type=submit]");
  if (button) {
    setTimeout(function () { button.disabled = true; }, 0);
  }
});
