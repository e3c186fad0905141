package main

// Stub: replaced by the HTTP work (issue 3).

func httpMethods(t methodTable) {}
