package console_test

import (
	"os"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// firefox is Debian's firefox-esr, which scripts/setup.sh installs.
const firefox = "/usr/bin/firefox-esr"

// TestConsoleFirefox is a smoke run of the console in Debian's
// firefox-esr, driven by puppeteer-core over WebDriver BiDi
// (firefox/firefox.mjs): a wrong key is refused, key A signs in, a
// sandbox made through the Go SDK appears, its terminal runs echo, a file
// uploads, the console kills it, and no console error or page error
// happens on the way. Screenshots go to $HUTCH_ARTIFACTS/console-firefox
// (else /var/tmp/hutch-artifacts/console-firefox).
func TestConsoleFirefox(t *testing.T) {
	if _, err := os.Stat(firefox); err != nil {
		t.Fatalf("Debian's firefox-esr is needed (scripts/setup.sh installs it): %v", err)
	}
	js := hutchtest.JSPackage(t, "console/firefox")
	srv := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0")
	cfgA := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	// TMPDIR: puppeteer's Firefox profile goes in the test's temporary
	// directory, which goes even when node does not get to remove it.
	newBrowserScript(t, cfgA, "console-firefox").run(t, js, "firefox.mjs", 5*time.Minute, "HUTCH_URL="+srv.URL(), "KEY_A="+hutchtest.TestKey,
		"ARTIFACTS="+artifactsDir(t, "console-firefox"), "FIREFOX="+firefox, "PUPPETEER_SKIP_DOWNLOAD=1", "TMPDIR="+t.TempDir())
}
