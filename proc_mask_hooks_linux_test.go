package main

// The test hooks of credential masking (proc_mask.go): the state directory a test server
// keeps its masking CA in, and the roots it verifies intercepted origins with. New file: kept
// apart from the leak test so that test can be run against a base without masking (where
// this file is a no-op).

import "crypto/x509"

// maskTestHooks gives s its masking state under stateDir, verifying origins against roots.
func maskTestHooks(s *server, stateDir string, roots *x509.CertPool) {
	s.mask = newMaskServer(stateDir)
	s.mask.originRoots = roots
}
