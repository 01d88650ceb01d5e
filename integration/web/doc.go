// Package web tests pacer web (cmd/pacer) in a real browser: headless
// Chromium from the system's packages, driven with chromedp, reads the page
// a person would see of a demo fleet, takes a screenshot, and makes a
// change from the page. It lives in the integration module so that
// chromedp never reaches a user's build of the library or of cmd/pacer.
//
// Without Chromium (/usr/bin/chromium, or $PACER_CHROMIUM) the test skips,
// unless CI is set: then it fails, unless PACER_BROWSER=skip says that the
// CI script could not install Chromium and said so. With
// PACER_WEB_SCREENSHOT=<path> it writes the screenshot there (docs/web.png
// comes from it).
package web
