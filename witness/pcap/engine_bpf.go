package pcap

import "golang.org/x/net/bpf"

// bpfInstruction is a classic BPF instruction as the kernel takes it.
type bpfInstruction = bpf.RawInstruction
