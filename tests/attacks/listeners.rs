//! driftwatch's own ports: the audit webhook and the operations listener, against
//! large batches, held connections and scrape floods; the SIEM's source address.
