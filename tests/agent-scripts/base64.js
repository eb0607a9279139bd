const token = btoa("pve1:104");
[token, atob(token)]
