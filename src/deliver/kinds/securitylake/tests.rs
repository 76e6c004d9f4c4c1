//! The Security Lake destination against loopback stand-ins.
