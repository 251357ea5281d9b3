package login

// TrampolineProgram is the file name of the login trampoline's own program
// (cmd/aptl-login-trampoline), which a server uses when it lies beside its
// own (UseTrampolineProgram, trampoline_linux.go), and which the builds
// that ship the server put there.
const TrampolineProgram = "aptl-login-trampoline"
