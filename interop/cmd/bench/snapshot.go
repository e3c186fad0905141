package main

// The shell-snapshot metric (docs/protocol.md §6.4.1 of the root module): what one command
// costs when Codex runs it as `bash -lc SCRIPT` in a HOME whose login profile takes
// snapshotProfileDelay, with and without process/start's shellSnapshot, side by side on the
// same server in the same round. A server that ignores shellSnapshot pays the profile in
// both rows.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// snapshotProfileDelay is what the benchmarked login profile sleeps, standing for a slow
// .profile (version managers, completions, prompts).
const snapshotProfileDelay = "0.2"

// snapshotStart is process/start with a shell snapshot.
type snapshotStart struct {
	startParams
	ShellSnapshot map[string]any `json:"shellSnapshot,omitempty"`
}

func shellSnapshots(ctx context.Context, rc *runCtx) error {
	home, err := os.MkdirTemp(rc.fx.dir, "home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	profile := "export SNAP_VAR=1\nsnapfn() { :; }\necho profile >&2\nsleep " + snapshotProfileDelay + "\n"
	if err := os.WriteFile(filepath.Join(home, ".profile"), []byte(profile), 0o644); err != nil {
		return err
	}
	env := map[string]string{"PATH": childEnv["PATH"], "HOME": home}
	script := `test "$SNAP_VAR" = 1 && snapfn`
	return rc.withClient(ctx, func(c *client) error {
		for _, on := range []bool{false, true} {
			key, snap := "snap-off", map[string]any(nil)
			if on {
				key = "snap-on"
				snap = map[string]any{"scopeId": fmt.Sprintf("bench:%d", rc.round), "shell": map[string]any{"name": "bash", "path": "/bin/bash"}}
			}
			for i := 0; i < warmups+rc.cfg.samples; i++ {
				id := rc.procID(key)
				w := c.watch(id, false)
				cl, err := c.start("process/start", snapshotStart{
					startParams:   startParams{ProcessID: id, Argv: []string{"/bin/bash", "-lc", script}, Cwd: fileURI(home), Env: env},
					ShellSnapshot: snap,
				})
				if err != nil {
					c.unwatch(id)
					return err
				}
				if _, err := cl.wait(ctx, c); err != nil {
					c.unwatch(id)
					return fmt.Errorf("%s process/start: %w", key, err)
				}
				err = c.waitClosed(ctx, w)
				c.unwatch(id)
				if err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				if err := w.check(-1, 0); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				if i == 0 && on {
					rc.add("snap-first", ms(w.closedAt.Sub(cl.sent)))
				}
				if i >= warmups {
					rc.add(key, ms(w.closedAt.Sub(cl.sent)))
				}
			}
		}
		return nil
	})
}
