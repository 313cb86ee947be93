package transport

import (
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/launch"
)

// TestConfigFromEnv: the rank, world, address, token, its opt-out and the
// timeout of the environment reach the transport's configuration.
func TestConfigFromEnv(t *testing.T) {
	e := launch.Env{Rank: 1, World: 3, MasterAddr: "h", MasterPort: 7, Token: "tok", AllowNoToken: true, Timeout: 42 * time.Second}
	c := ConfigFromEnv(e, "fp")
	want := TCPConfig{Rank: 1, World: 3, MasterAddr: "h:7", Token: "tok", AllowNoToken: true, Timeout: 42 * time.Second, Fingerprint: "fp"}
	if c.Rank != want.Rank || c.World != want.World || c.MasterAddr != want.MasterAddr || c.Token != want.Token ||
		c.AllowNoToken != want.AllowNoToken || c.Timeout != want.Timeout || c.Fingerprint != want.Fingerprint {
		t.Errorf("ConfigFromEnv = %+v\nwant %+v", c, want)
	}
}
