package main

// Stub: replaced by the processes work (issue 2).

// procTable is a session's processes.
type procTable struct{ s *session }

func newProcTable(s *session) *procTable { return &procTable{s: s} }

// killAll kills every process group of the table.
func (t *procTable) killAll() {}

func procMethods(t methodTable) {}
