package main

// arm64 has every row of the seccomp filter's table that it names (seccomp_linux.go): those
// only amd64 has are seccompAbsent here.

// seccompNativeOnlyCalls are the table's rows that arm64 lacks: none to check natively here.
func seccompNativeOnlyCalls() map[string]uint32 { return nil }
