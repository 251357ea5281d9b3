module github.com/aptl/aptl-kali-capture

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	github.com/gliderlabs/ssh v0.3.8
	github.com/google/gopacket v1.1.19
	golang.org/x/crypto v0.59.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/anmitsu/go-shlex v0.0.0-20200514113438-38f4b401e2be // indirect
