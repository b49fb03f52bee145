package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// mf send of a file without a message fails and names the file: it used to
// print "sent 0 messages" and exit 0, which a script takes for success.
func TestSendOfAFileWithoutMessagesFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.hl7")
	if err := os.WriteFile(empty, []byte("\r\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: the file must be refused before any sending.
	out, err := runMF(t, "send", "--to", enginetest.FreeAddr(t), empty)
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "no HL7 message") {
		t.Fatalf("mf send of a file without messages: error %v, printed %q; want one naming %s", err, out, empty)
	}
}
