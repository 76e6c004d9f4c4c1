//! Credentials inside text (env files, scripts, connection strings, registry auth,
//! keys): masked line by line and token by token before any receiver or `/history` sees
//! them.
