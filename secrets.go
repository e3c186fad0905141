package main

// The files this server holds as secrets (docs/sandbox.md §2, "Connect-back"): whoever reads
// one can drive the server, or speak for it to a registry. Sandboxes are denied them.

import (
	"os"
	"path/filepath"
)

// secretFiles are o's secret files, each as given and, where it differs, as resolved (the
// view and Landlock both work on resolved paths). One is a directory: the masking CA's,
// whose key is replaced by renames (docs/network.md §8, "The CA").
func secretFiles(o *cliOptions) []string {
	var files []string
	add := func(path string) {
		if path == "" {
			return
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		files = append(files, path)
		if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
			files = append(files, real)
		}
	}
	add(o.wsTokenFile)
	add(o.wsSecretFile)
	r := &o.remote
	add(r.identityFile)
	if r.forward != nil {
		add(r.forward.tokenFile)
	}
	if r.credMode == credCodexLogin && r.codexHome != "" {
		add(filepath.Join(r.codexHome, codexAuthFile))
	}
	add(mitmCADir(o)) // the credential-masking CA's directory, its key within (netproxy_mitm.go)
	if r.awsSigV4 {
		cred, _ := awsFilePaths(os.Getenv)
		add(cred)
	}
	return files
}
