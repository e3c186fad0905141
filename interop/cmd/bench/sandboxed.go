package main

// The sandboxed metrics: the same operations under the sandbox object Codex sends in its
// workspace-write mode (docs/sandbox.md), where the reference runs a helper per fs write and
// per process.

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
)

// workspaceWrite is Codex's workspace-write sandbox object for the workspace dir.
func workspaceWrite(dir string) map[string]any {
	special := func(kind, access string) map[string]any {
		return map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": kind}}, "access": access}
	}
	return map[string]any{
		"permissions": map[string]any{
			"type": "managed",
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				special("root", "read"), special("project_roots", "write"),
				special("slash_tmp", "write"), special("tmpdir", "write"),
			}},
			"network": "restricted",
		},
		"windowsSandboxLevel": "disabled",
		"cwd":                 fileURI(dir),
		"workspaceRoots":      []string{fileURI(dir)},
	}
}

// sandboxedStart is process/start with a sandbox.
type sandboxedStart struct {
	startParams
	Sandbox map[string]any `json:"sandbox"`
}

func sandboxed(ctx context.Context, rc *runCtx) error {
	ws, err := os.MkdirTemp(rc.fx.dir, "ws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	sb := workspaceWrite(ws)
	data := base64.StdEncoding.EncodeToString(make([]byte, 4096))
	small := filepath.Join(ws, "small")
	if err := os.WriteFile(small, make([]byte, 4096), 0o644); err != nil {
		return err
	}
	return rc.withClient(ctx, func(c *client) error {
		timed := func(key, method string, params map[string]any, before func() error) error {
			params["sandbox"] = sb
			for i := 0; i < warmups+rc.cfg.samples; i++ {
				if before != nil {
					if err := before(); err != nil {
						return err
					}
				}
				_, d, err := c.call(ctx, method, params)
				if err != nil {
					return fmt.Errorf("sandboxed %s: %w", method, err)
				}
				if i >= warmups {
					rc.add(key, ms(d))
				}
			}
			return nil
		}
		dir := filepath.Join(ws, "d")
		gone := filepath.Join(ws, "gone")
		steps := []error{
			timed("sb-writeFile", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "w")), "dataBase64": data}, nil),
			timed("sb-createDirectory", "fs/createDirectory", map[string]any{"path": fileURI(dir)}, func() error { return os.RemoveAll(dir) }),
			timed("sb-remove", "fs/remove", map[string]any{"path": fileURI(gone)}, func() error { return os.WriteFile(gone, nil, 0o644) }),
			timed("sb-getMetadata", "fs/getMetadata", map[string]any{"path": fileURI(small)}, nil),
			timed("sb-readFile", "fs/readFile", map[string]any{"path": fileURI(small)}, nil),
		}
		for _, err := range steps {
			if err != nil {
				return err
			}
		}
		for _, tty := range []bool{false, true} {
			mode := "pipe"
			if tty {
				mode = "pty"
			}
			for i := 0; i < warmups+rc.cfg.samples; i++ {
				id := rc.procID("sb-" + mode)
				w := c.watch(id, false)
				cl, err := c.start("process/start", sandboxedStart{
					startParams: startParams{ProcessID: id, Argv: []string{"/bin/true"}, Cwd: fileURI(ws), Env: childEnv, TTY: tty},
					Sandbox:     sb,
				})
				if err != nil {
					c.unwatch(id)
					return err
				}
				if _, err := cl.wait(ctx, c); err != nil {
					c.unwatch(id)
					return fmt.Errorf("sandboxed process/start %s: %w", mode, err)
				}
				err = c.waitClosed(ctx, w)
				c.unwatch(id)
				if err != nil {
					return fmt.Errorf("sandboxed %s: %w", mode, err)
				}
				if err := w.check(0, 0); err != nil {
					return fmt.Errorf("sandboxed %s /bin/true: %w", mode, err)
				}
				if i >= warmups {
					rc.add("sb-closed-"+mode, ms(w.closedAt.Sub(cl.sent)))
				}
			}
		}
		return nil
	})
}
