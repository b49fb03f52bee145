package config_test

import (
	"os"
	"testing"

	"github.com/messagefoundry/mf/config"
)

// FuzzParse: whatever the file holds, loading it returns a config or an
// error, never a panic, and an accepted config passes its own validation
// again (defaults and validation agree).
func FuzzParse(f *testing.F) {
	for _, name := range []string{"default.toml", "../examples/mf.toml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(minimal))
	f.Add([]byte("[store]\nbackend = \"postgres\"\nurl = \"postgres://db/mf\"\n[cluster]\nenabled = true\nheartbeat_seconds = 0.2\nleader_fence_timeout_seconds = 0.5\nleader_lease_ttl_seconds = 1.0\nnode_timeout_seconds = 1.0\n"))
	f.Add([]byte("[[route]]\nfrom = \"a\"\nto = [\"b\"]\nfilter = { \"MSH-9.1\" = \"ADT\", \"PID-3[2].1\" = \"x\" }\nlane_key = \"OBX[2]-5.1.2\"\n"))
	f.Add([]byte("[[api.tokens]]\nname = \"g\"\nrole = \"viewer\"\nsha256 = \"0123\"\n"))
	f.Add([]byte("[store\nbackend = sqlite"))
	f.Add([]byte("pool_size = -1\n[inbound]\nname = 3\n"))
	f.Add([]byte{0xff, 0xfe, '[', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b, "fuzz.toml")
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted config fails its own validation: %v", err)
		}
	})
}
