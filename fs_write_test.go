package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const tempModeHelperEnv = "EXEC_SERVER_TEMP_MODE_HELPER"

// TestWriteTempFileNeverWiderThanResult: the temporary file of an atomic replacement is
// created with no permission bit its result will not have, so nobody can open it in the
// moment before the chmod and read what is written later (the tokens of auth.json). The checks
// run in a child process with umask 0, where nothing narrows a too-wide creation mode, and see
// each temporary file through testHookTempCreated as soon as it exists.
func TestWriteTempFileNeverWiderThanResult(t *testing.T) {
	if os.Getenv(tempModeHelperEnv) == "1" {
		tempModeChecks(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteTempFileNeverWiderThanResult$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), tempModeHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "temp-mode checks done") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// tempModeChecks is the child's part of TestWriteTempFileNeverWiderThanResult.
func tempModeChecks(t *testing.T) {
	syscall.Umask(0)
	var created []os.FileMode
	testHookTempCreated = func(f *os.File) {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, fi.Mode().Perm())
	}
	defer func() { testHookTempCreated = nil }()

	fill := func(f *os.File) error {
		_, err := f.WriteString("secret")
		return err
	}
	mode := func(m os.FileMode) *os.FileMode { return &m }
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		old   os.FileMode // 0: no file yet
		perm  *os.FileMode
		write func(path string, perm *os.FileMode) error
		want  os.FileMode
	}{
		{name: "auth.json", old: 0o600, write: func(path string, _ *os.FileMode) error {
			return writeFileAtomic(path, []byte("secret"), 0o600)
		}, want: 0o600},
		{name: "auth.json once readable by others", old: 0o644, write: func(path string, _ *os.FileMode) error {
			return writeFileAtomic(path, []byte("secret"), 0o600)
		}, want: 0o600},
		{name: "fs/writeFile over a private file", old: 0o600, want: 0o600},
		{name: "fs/writeFile over a group-readable file", old: 0o640, want: 0o640},
		{name: "fs/copy to a new file", perm: mode(0o600), want: 0o600},
		{name: "fs/copy over a world-readable file", old: 0o644, perm: mode(0o600), want: 0o600},
		{name: "fs/writeFile to a new file", want: 0o666},
	} {
		created = nil
		path := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(tc.name))
		if tc.old != 0 {
			if err := os.WriteFile(path, []byte("old"), tc.old); err != nil {
				t.Fatal(err)
			}
		}
		write := tc.write
		if write == nil {
			write = func(path string, perm *os.FileMode) error {
				return writeFileContents(context.Background(), path, perm, fsWritesDirect(), fill)
			}
		}
		if err := write(path, tc.perm); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(created) != 1 {
			t.Fatalf("%s: %d temporary files, want 1 (the atomic path was not taken)", tc.name, len(created))
		}
		if created[0]&^tc.want != 0 {
			t.Errorf("%s: temporary file created with mode %04o, wider than the result's %04o", tc.name, created[0], tc.want)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		if fi.Mode().Perm() != tc.want || string(data) != "secret" {
			t.Errorf("%s: result mode %04o, content %q; want %04o, %q", tc.name, fi.Mode().Perm(), data, tc.want, "secret")
		}
	}
	files := 7
	if os.Geteuid() == 0 { // another user's file, which only root can replace
		files++
		path := filepath.Join(dir, "another-user's")
		if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 4321, 4321); err != nil {
			t.Fatal(err)
		}
		created = nil
		if err := writeFileContents(context.Background(), path, nil, fsWritesDirect(), fill); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case len(created) != 1 || created[0] != 0o600:
			t.Errorf("another user's file: temporary files created with modes %04o, want one with 0600 (our group is not theirs)", created)
		case fi.Mode().Perm() != 0o640 || st.Uid != 4321 || st.Gid != 4321:
			t.Errorf("another user's file: result %04o %d:%d, want 0640 4321:4321", fi.Mode().Perm(), st.Uid, st.Gid)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != files {
		t.Errorf("%d files in the directory, want %d: temporary files left behind?", len(entries), files)
	}
	fmt.Println("temp-mode checks done")
}
