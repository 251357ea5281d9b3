term.min.js is term.js 0.0.7, an xterm emulator, as Debian's libjs-term.js
(0.0.7-4) ships it in /usr/share/javascript/term.js/term.min.js, copied
unchanged. Its licence (Expat, the MIT licence), from the header of
Debian's term.js:

term.js - an xterm emulator
Copyright (c) 2012-2013, Christopher Jeffrey (MIT License)
Originally forked from (with the author's permission) Fabrice Bellard's
javascript vt100 for jslinux, Copyright (c) 2011 Fabrice Bellard.

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
THE SOFTWARE.
